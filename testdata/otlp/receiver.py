#!/usr/bin/env python3
"""A minimal OTLP/HTTP metrics receiver for bcd's tests.

Usage: receiver.py OUT.jsonl

Listens on 127.0.0.1 on a free port and prints the port on its first line of stdout. Each
POST body is decoded with the OpenTelemetry protobuf definitions (the `opentelemetry-proto`
package: ExportMetricsServiceRequest.FromString), and every gauge data point is written to
OUT.jsonl as one JSON object: path, content type, resource attributes, scope, metric name,
unit, point attributes, time and value (with which of as_int/as_double carried it). A body
that does not decode is answered 400 and written as {"error": ...}.
"""

import json
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)


def any_value(v):
    which = v.WhichOneof("value")
    return getattr(v, which) if which else None


class Handler(BaseHTTPRequestHandler):
    out = None

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        try:
            request = ExportMetricsServiceRequest.FromString(body)
        except Exception as e:  # the test reads the error line
            self.write({"error": str(e), "path": self.path})
            self.answer(400, b"undecodable")
            return
        for rm in request.resource_metrics:
            resource = {kv.key: any_value(kv.value) for kv in rm.resource.attributes}
            for sm in rm.scope_metrics:
                for metric in sm.metrics:
                    for point in metric.gauge.data_points:
                        which = point.WhichOneof("value")
                        self.write(
                            {
                                "path": self.path,
                                "content_type": self.headers.get("Content-Type"),
                                "resource": resource,
                                "scope": sm.scope.name,
                                "name": metric.name,
                                "unit": metric.unit,
                                "attributes": {
                                    kv.key: any_value(kv.value) for kv in point.attributes
                                },
                                "time_unix_nano": point.time_unix_nano,
                                "type": which,
                                "value": getattr(point, which) if which else None,
                            }
                        )
        self.answer(200, ExportMetricsServiceResponse().SerializeToString())

    def write(self, record):
        self.out.write(json.dumps(record) + "\n")
        self.out.flush()

    def answer(self, status, body):
        self.send_response(status)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def main():
    Handler.out = open(sys.argv[1], "a", encoding="utf-8")
    server = HTTPServer(("127.0.0.1", 0), Handler)
    print(server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
