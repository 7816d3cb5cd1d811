"""A stand-in API server and a stand-in kubelet for bcd's DRA driver, then its scenario.

No kube-apiserver or kubelet binary can be installed here, so both are stand-ins:

- The API server is this script's own small HTTPS server (Python's http.server and ssl; kmock
  was not used because the driver's client needs TLS with a subjectAltName for 127.0.0.1 and
  a bearer token, and every object written must be checked): a certificate made with openssl
  for IP 127.0.0.1, a bearer token, and ResourceSlices (list with field selectors, watch,
  create with generateName, update with 409 on a stale resourceVersion, delete with
  preconditions), ResourceClaims (get) and the Node (get). Every ResourceSlice bcd writes is
  validated strictly against the resource.k8s.io/v1 schema of Kubernetes 1.34 (PyPI
  kubernetes-validate); one that fails ends the scenario.
- The kubelet is grpcio, with stubs generated from bcd's .proto files at test time: it finds
  the registration socket, asks GetInfo, takes the first service it knows from
  supported_versions, says NotifyRegistrationStatus, prepares and unprepares claims on the
  DRA socket and reads the health stream.

It starts `bcd node --dra` itself (after the server, whose address the kubeconfig names), runs
the scenario and exits 0 when every check passed; figures are printed as
`figure <name> <value>` lines.

The API server plays one Kubernetes version (SERVER_VERSION, 1.34 by default): `GET /version`
says it, every object is validated against that version's schema, and the fields of the
feature gates a server of that version has off (GATES_OFF; by default DRADeviceTaints and
DRAConsumableCapacity before 1.36, none from 1.36) are dropped from what it stores and
returns, as a real server drops them. It sets a taint's timeAdded as a real server does.

Scenarios (SCENARIO): `main` (1.34: whole GPUs, MIG devices, claims, faults) and `shares`
(1.36 with bcd node --gpu-slots 2: shared devices with consumable capacity, shares
prepared, taints instead of dropping, then the gates off and bcd falling back).

Environment: BCD, BCD_GLOBAL (JSON list of bcd's global options), WORK (a folder of the
test's own), PROTO_DIR, KMSG (the fake host's kernel log), PACKAGING (the packaging folder,
whose Kubernetes manifests are validated too), API_GROUP (the API socket's group; root by
default), SERVER_VERSION, GATES_OFF, SCENARIO.
"""

import base64
import json
import os
import queue
import ssl
import subprocess
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import grpc
import kubernetes_validate
from grpc_tools import protoc

WORK = os.environ["WORK"]
PROTO_DIR = os.environ["PROTO_DIR"]
STUBS = os.path.join(WORK, "stubs")
os.makedirs(STUBS, exist_ok=True)
for proto in ("dra/v1/api.proto", "pluginregistration/v1/api.proto",
              "dra_health/v1alpha1/api.proto"):
    if protoc.main(["protoc", f"-I{PROTO_DIR}", f"--python_out={STUBS}",
                    f"--grpc_python_out={STUBS}", os.path.join(PROTO_DIR, proto)]) != 0:
        sys.exit(f"protoc failed on {proto}")
sys.path.insert(0, STUBS)
from dra.v1 import api_pb2 as dra, api_pb2_grpc as dra_grpc  # noqa: E402
from pluginregistration.v1 import api_pb2 as reg, api_pb2_grpc as reg_grpc  # noqa: E402
from dra_health.v1alpha1 import api_pb2 as health, api_pb2_grpc as health_grpc  # noqa: E402

NODE = "node-a"
NODE_UID = "5c1f2b7a-0000-4000-8000-000000000001"
TOKEN = "stand-in-token"
DRIVER = "gpu.bcd.dev"
KUBELET = os.path.join(WORK, "kubelet")
CDI_RUN = os.path.join(WORK, "run-cdi")
REG_SOCK = os.path.join(KUBELET, "plugins_registry", "gpu.bcd.dev-reg.sock")
OPTIONS = [("grpc.default_authority", "localhost")]
SLICES = "/apis/resource.k8s.io/v1/resourceslices"
SERVER_VERSION = os.environ.get("SERVER_VERSION", "1.34")
MINOR = int(SERVER_VERSION.split(".")[1])
SCENARIO = os.environ.get("SCENARIO", "main")
NEWER_GATES = {"DRADeviceTaints", "DRAConsumableCapacity"}


def check(cond, what):
    if not cond:
        print(f"FAILED: {what}", flush=True)
        sys.exit(1)
    print(f"ok: {what}", flush=True)


def wait(what, pred, timeout=10.0, quiet=False):
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        got = pred()
        if got:
            return time.monotonic()
        time.sleep(0.05)
    if quiet:
        return None
    check(False, f"{what} within {timeout}s")


class State:
    """The stand-in API server's objects, and what happened to them."""

    def __init__(self):
        self.lock = threading.Condition()
        self.rv = 100
        self.slices = {}  # name -> object
        self.claims = {}  # (namespace, name) -> object
        self.history = []  # (rv, type, object)
        self.writes = []  # (method, name)
        self.invalid = []  # (what, error)
        self.fail = []  # status codes the next writes get
        self.reject = 0  # how many of the next writes get a 422
        self.attempts = 0  # writes asked for, answered or not
        self.down = False
        self.n = 0
        off = os.environ.get("GATES_OFF")
        self.gates_off = set(filter(None, off.split(","))) if off is not None else \
            (NEWER_GATES if MINOR < 36 else set())
        self.sent = []  # every device bcd wrote, as sent (before any field was dropped)
        self.stored_log = []  # (wall time, device names, tainted device names) per write
        self.dry_runs = []  # what bcd sent as dry runs, and what it got back
        self.dry_run_fails = False  # answer every dry run with a 500

    def bump(self):
        self.rv += 1
        return str(self.rv)

    def event(self, kind, obj):
        self.history.append((int(obj["metadata"]["resourceVersion"]), kind, json.loads(json.dumps(obj))))
        self.lock.notify_all()

    def wipe(self):
        """What the kubelet does on start: DeleteCollection of the node's slices."""
        with self.lock:
            for name in list(self.slices):
                obj = self.slices.pop(name)
                obj["metadata"]["resourceVersion"] = self.bump()
                self.event("DELETED", obj)

    def ours(self):
        with self.lock:
            return [s for s in self.slices.values()
                    if s["spec"]["driver"] == DRIVER and s["spec"].get("nodeName") == NODE]

    def devices(self):
        """Device name -> device, over the pool's slices of the highest generation."""
        slices = self.ours()
        if not slices:
            return {}
        top = max(s["spec"]["pool"]["generation"] for s in slices)
        current = [s for s in slices if s["spec"]["pool"]["generation"] == top]
        if len(current) != current[0]["spec"]["pool"]["resourceSliceCount"]:
            return {}
        return {d["name"]: d for s in current for d in s["spec"]["devices"]}


STATE = State()


def selected(obj, selector):
    for term in filter(None, (selector or "").split(",")):
        key, _, want = term.partition("=")
        value = obj
        for part in key.split("."):
            value = value.get(part, {}) if isinstance(value, dict) else {}
        if value != want:
            return False
    return True


class Api(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # A response's headers and body go in two writes: with Nagle's algorithm on, the body
    # waits for the client's delayed ACK (40 ms), which kube-apiserver (Go, TCP_NODELAY) never
    # makes anyone wait.
    disable_nagle_algorithm = True

    def log_message(self, *args):
        pass

    def answer(self, code, body):
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def status(self, code, reason, message):
        self.answer(code, {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                           "reason": reason, "message": message, "code": code})

    def body(self):
        n = int(self.headers.get("Content-Length") or 0)
        return json.loads(self.rfile.read(n) or b"{}")

    def authorized(self):
        if STATE.down:
            self.status(503, "ServiceUnavailable", "the stand-in is down")
            return False
        if self.headers.get("Authorization") != f"Bearer {TOKEN}":
            self.status(401, "Unauthorized", "no bearer token")
            return False
        return True

    def injected(self):
        with STATE.lock:
            STATE.attempts += 1
            code = STATE.fail.pop(0) if STATE.fail else None
            if code is None and STATE.reject > 0:
                STATE.reject -= 1
                code = 422
        if code:
            self.status(code, "Injected", f"an injected {code}")
            return True
        return False

    def do_GET(self):
        if not self.authorized():
            return
        url = urllib.parse.urlparse(self.path)
        query = dict(urllib.parse.parse_qsl(url.query))
        parts = url.path.strip("/").split("/")
        if url.path == "/version":
            return self.answer(200, {"major": "1", "minor": str(MINOR), "gitVersion": f"v{SERVER_VERSION}.0",
                                     "platform": "linux/amd64"})
        if url.path == f"/api/v1/nodes/{NODE}":
            return self.answer(200, {"apiVersion": "v1", "kind": "Node",
                                     "metadata": {"name": NODE, "uid": NODE_UID}})
        if len(parts) == 7 and parts[:4] == ["apis", "resource.k8s.io", "v1", "namespaces"] \
                and parts[5] == "resourceclaims":
            with STATE.lock:
                claim = STATE.claims.get((parts[4], parts[6]))
            if claim is None:
                return self.status(404, "NotFound", "no such claim")
            return self.answer(200, claim)
        if url.path == SLICES and query.get("watch") in ("true", "1"):
            return self.watch(query)
        if url.path == SLICES:
            with STATE.lock:
                items = [s for s in STATE.slices.values() if selected(s, query.get("fieldSelector"))]
                return self.answer(200, {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSliceList",
                                         "metadata": {"resourceVersion": str(STATE.rv)}, "items": items})
        self.status(404, "NotFound", f"no route {url.path}")

    def watch(self, query):
        since = int(query.get("resourceVersion") or 0)
        until = time.monotonic() + min(float(query.get("timeoutSeconds") or 290), 290)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        sent = since
        try:
            while time.monotonic() < until and not STATE.down:
                with STATE.lock:
                    new = [h for h in STATE.history if h[0] > sent]
                    if not new:
                        STATE.lock.wait(0.2)
                        continue
                for rv, kind, obj in new:
                    sent = rv
                    if not selected(obj, query.get("fieldSelector")):
                        continue
                    line = json.dumps({"type": kind, "object": obj}).encode() + b"\n"
                    self.wfile.write(f"{len(line):x}\r\n".encode() + line + b"\r\n")
                    self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            pass

    def kept(self, obj):
        """`obj` less the fields of the gates that are off, as a server of SERVER_VERSION
        stores and returns it."""
        for d in obj["spec"].get("devices", []):
            if "DRADeviceTaints" in STATE.gates_off:
                d.pop("taints", None)
            if "DRAConsumableCapacity" in STATE.gates_off:
                d.pop("allowMultipleAllocations", None)
                for c in d.get("capacity", {}).values():
                    c.pop("requestPolicy", None)
        return obj

    def stored(self, obj, old=None):
        """What a server of SERVER_VERSION keeps of `obj`: the fields of the gates off dropped,
        a new taint's timeAdded set (an unchanged one keeps the stored time)."""
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        before = {d["name"]: d for d in (old or {}).get("spec", {}).get("devices", [])}
        for d in obj["spec"].get("devices", []):
            STATE.sent.append(json.loads(json.dumps(d)))
        self.kept(obj)
        for d in obj["spec"].get("devices", []):
            for t in d.get("taints", []):
                if "timeAdded" not in t:
                    same = [o for o in before.get(d["name"], {}).get("taints", [])
                            if (o["key"], o.get("value"), o["effect"]) == (t["key"], t.get("value"), t["effect"])]
                    t["timeAdded"] = same[0]["timeAdded"] if same else now
        devices = obj["spec"].get("devices", [])
        STATE.stored_log.append((time.time(), {d["name"] for d in devices},
                                 {d["name"] for d in devices if d.get("taints")}))
        return obj

    def validated(self, obj, what):
        try:
            kubernetes_validate.validate(obj, f"{SERVER_VERSION}.0", strict=True)
            return True
        except Exception as e:  # noqa: BLE001 (any failure is the finding)
            STATE.invalid.append((what, str(e)[:500]))
            self.status(422, "Invalid", str(e)[:300])
            return False

    def do_POST(self):
        obj = self.body()  # read first: an early answer must leave no body on the connection
        if not self.authorized() or self.injected():
            return
        if self.path.split("?")[0] != SLICES:
            return self.status(404, "NotFound", self.path)
        if not self.validated(obj, "create"):
            return
        query = dict(urllib.parse.parse_qsl(urllib.parse.urlparse(self.path).query))
        if query.get("dryRun") == "All":
            if STATE.dry_run_fails:
                return self.status(500, "InternalError", "the stand-in fails dry runs")
            sent = json.loads(json.dumps(obj))
            obj["metadata"]["name"] = obj["metadata"].pop("generateName") + "dryrun"
            back = self.kept(obj)
            with STATE.lock:
                STATE.dry_runs.append((sent, back))
            return self.answer(201, back)
        with STATE.lock:
            STATE.n += 1
            meta = obj["metadata"]
            meta["name"] = meta.pop("generateName") + f"{STATE.n:05d}"
            meta["uid"] = f"uid-{STATE.n}"
            meta["resourceVersion"] = STATE.bump()
            obj = self.stored(obj)
            STATE.slices[meta["name"]] = obj
            STATE.writes.append(("create", meta["name"]))
            STATE.event("ADDED", obj)
        self.answer(201, obj)

    def do_PUT(self):
        obj = self.body()
        if not self.authorized() or self.injected():
            return
        name = self.path.split("?")[0].rsplit("/", 1)[-1]
        if not self.validated(obj, "update"):
            return
        with STATE.lock:
            old = STATE.slices.get(name)
            if old is None:
                return self.status(404, "NotFound", name)
            if obj["metadata"].get("resourceVersion") != old["metadata"]["resourceVersion"]:
                return self.status(409, "Conflict", "the object has been modified")
            obj["metadata"]["uid"] = old["metadata"]["uid"]
            obj["metadata"]["resourceVersion"] = STATE.bump()
            obj = self.stored(obj, old)
            STATE.slices[name] = obj
            STATE.writes.append(("update", name))
            STATE.event("MODIFIED", obj)
        self.answer(200, obj)

    def do_DELETE(self):
        pre = self.body().get("preconditions") or {}
        if not self.authorized() or self.injected():
            return
        name = self.path.split("?")[0].rsplit("/", 1)[-1]
        with STATE.lock:
            old = STATE.slices.get(name)
            if old is None:
                return self.status(404, "NotFound", name)
            m = old["metadata"]
            if ("uid" in pre and pre["uid"] != m["uid"]) or \
                    ("resourceVersion" in pre and pre["resourceVersion"] != m["resourceVersion"]):
                return self.status(409, "Conflict", "precondition failed")
            del STATE.slices[name]
            m["resourceVersion"] = STATE.bump()
            STATE.writes.append(("delete", name))
            STATE.event("DELETED", old)
        self.answer(200, {"kind": "Status", "apiVersion": "v1", "status": "Success"})


def certificate():
    """A CA and a server certificate it signs for IP 127.0.0.1 (rustls refuses a CA
    certificate as the server's own, and a certificate without a subjectAltName)."""
    f = lambda name: os.path.join(WORK, name)  # noqa: E731
    with open(f("server.ext"), "w") as ext:
        ext.write("subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n"
                  "keyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n")
    for cmd in (
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=stand-in CA", "-keyout", f("ca.key"), "-out", f("ca.pem")],
        ["openssl", "req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1",
         "-keyout", f("key.pem"), "-out", f("server.csr")],
        ["openssl", "x509", "-req", "-in", f("server.csr"), "-CA", f("ca.pem"), "-CAkey", f("ca.key"),
         "-CAcreateserial", "-days", "1", "-extfile", f("server.ext"), "-out", f("cert.pem")],
    ):
        subprocess.run(cmd, check=True, capture_output=True, timeout=60)
    return f("key.pem"), f("cert.pem"), f("ca.pem")


def serve():
    key, cert, ca_file = certificate()
    server = ThreadingHTTPServer(("127.0.0.1", 0), Api)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    kubeconfig = os.path.join(WORK, "kubeconfig")
    with open(ca_file) as f:
        ca = base64.b64encode(f.read().encode()).decode()
    with open(kubeconfig, "w") as f:
        json.dump({"apiVersion": "v1", "kind": "Config", "current-context": "stand-in",
                   "clusters": [{"name": "stand-in", "cluster": {
                       "server": f"https://127.0.0.1:{server.server_address[1]}",
                       "certificate-authority-data": ca}}],
                   "users": [{"name": "bcd", "user": {"token": TOKEN}}],
                   "contexts": [{"name": "stand-in", "context": {"cluster": "stand-in", "user": "bcd"}}]},
                  f)
    return kubeconfig


def watcher_saw_xid():
    """The wall time bcd's XID watcher logged the XID (its WARN line in node.log)."""
    import datetime
    with open(os.path.join(WORK, "node.log")) as f:
        for line in f:
            if "Xid 79 on GPU" in line:
                stamp = line.split()[0].rstrip("Z")
                return datetime.datetime.fromisoformat(stamp).replace(tzinfo=datetime.timezone.utc).timestamp()
    return None


def first_write_after(since, pred):
    """The wall time of the first write after `since` whose (names, tainted) satisfy `pred`."""
    return next((t for t, names, tainted in STATE.stored_log if t >= since and pred(names, tainted)), None)


def bcd(*args):
    cmd = [os.environ["BCD"], *json.loads(os.environ["BCD_GLOBAL"]), *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60)


def allocated(uid, name, devices, request="gpu"):
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": "ml", "uid": uid},
            "spec": {"devices": {"requests": [{"name": request, "exactly": {"deviceClassName": "gpu.bcd.dev"}}]}},
            "status": {"allocation": {"devices": {"results": [
                {"request": request, "driver": DRIVER, "pool": NODE, "device": d} for d in devices]}}}}


def percentile(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


class Node:
    """`bcd node --dra`, started and restarted by the scenario."""

    def __init__(self, kubeconfig, extra=()):
        self.kubeconfig = kubeconfig
        self.extra = list(extra)
        self.log = open(os.path.join(WORK, "node.log"), "a")
        self.proc = None
        self.start()

    def start(self):
        self.proc = subprocess.Popen(
            [os.environ["BCD"], *json.loads(os.environ["BCD_GLOBAL"]), "node", "--api-group", os.environ.get("API_GROUP", "root"),
             "--dra", "--kubelet-dir", KUBELET, "--cdi-runtime-dir", CDI_RUN,
             "--kubeconfig", self.kubeconfig, "--node-name", NODE, *self.extra],
            stderr=self.log)

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)


def main():
    kubeconfig = serve()
    start = time.monotonic()
    node = Node(kubeconfig, ["--gpu-slots", "2"] if SCENARIO == "shares" else [])
    try:
        (shares if SCENARIO == "shares" else scenario)(start, node)
    finally:
        node.stop()
    print("all passed", flush=True)


def manifests():
    """The packaged RBAC and DeviceClasses, each object valid for Kubernetes 1.34."""
    import yaml
    folder = os.path.join(os.environ["PACKAGING"], "kubernetes")
    kinds = []
    for name in sorted(os.listdir(folder)):
        with open(os.path.join(folder, name)) as f:
            for obj in yaml.safe_load_all(f):
                kubernetes_validate.validate(obj, "1.34.0", strict=True)
                kinds.append(obj["kind"])
    check({"ClusterRole", "ClusterRoleBinding", "ServiceAccount", "DeviceClass"} <= set(kinds),
          f"the packaged manifests pass the 1.34 schema: {kinds}")
    role = [o for o in yaml.safe_load_all(open(os.path.join(folder, "dra-rbac.yaml"))) if o["kind"] == "ClusterRole"][0]
    verbs = {(r["resources"][0], v) for r in role["rules"] for v in r["verbs"]}
    need = {("resourceclaims", "get"), ("nodes", "get")} | {("resourceslices", v) for v in
                                                           ("get", "list", "watch", "create", "update", "delete")}
    check(need <= verbs, "the ClusterRole grants what the driver calls")


def scenario(start, node):
    manifests()
    # The kubelet finds the registration socket; the DRA socket listens by then.
    t = wait("the registration socket", lambda: os.path.exists(REG_SOCK), timeout=15)
    print(f"figure registered_after_start_s {t - start:.2f}")
    registration = reg_grpc.RegistrationStub(grpc.insecure_channel("unix://" + REG_SOCK, options=OPTIONS))
    info = registration.GetInfo(reg.InfoRequest(), timeout=5)
    check(info.type == "DRAPlugin" and info.name == DRIVER, f"GetInfo names a DRA plugin: {info.type} {info.name}")
    known = ["v1.DRAPlugin", "v1beta1.DRAPlugin"]
    chosen = next((v for v in info.supported_versions if v in known), None)
    check(chosen == "v1.DRAPlugin", f"the kubelet takes v1 first: {list(info.supported_versions)}")
    check(os.path.isabs(info.endpoint) and os.path.exists(info.endpoint), f"the endpoint is the DRA socket: {info.endpoint}")
    registration.NotifyRegistrationStatus(reg.RegistrationStatus(plugin_registered=True), timeout=5)
    channel = grpc.insecure_channel("unix://" + info.endpoint, options=OPTIONS)
    plugin = dra_grpc.DRAPluginStub(channel)

    # The first slices, every one validated.
    t = wait("the first ResourceSlices", lambda: len(STATE.devices()) > 0, timeout=20)
    print(f"figure first_slices_after_start_s {t - start:.2f}")
    devices = STATE.devices()
    check(not STATE.invalid, f"every object written passed the 1.34 schema: {STATE.invalid}")
    by_uuid = {d["attributes"]["uuid"]["string"]: name for name, d in devices.items() if "uuid" in d["attributes"]}
    gpus = sorted(n for n, d in devices.items() if d["attributes"]["type"]["string"] == "gpu")
    check(len(gpus) >= 2 and all(n.startswith("gpu-") for n in gpus), f"whole GPUs named by minor: {sorted(devices)}")
    first = devices[gpus[0]]
    check(first["attributes"]["resource.kubernetes.io/pciBusID"]["string"].startswith("0000:"),
          "the PCI bus id in the kernel's form")
    check("version" in first["attributes"]["driverVersion"], "driverVersion is a version")
    check(int(first["capacity"]["memory"]["value"].rstrip("kMGTPE") or 0) > 0, "memory in bytes")
    s = STATE.ours()[0]
    check(s["metadata"]["ownerReferences"][0] == {"apiVersion": "v1", "kind": "Node", "name": NODE,
                                                  "uid": NODE_UID, "controller": True},
          "owned by the Node")
    check(s["metadata"]["name"].startswith(f"{NODE}-gpu.bcd.dev-"), "generateName <node>-gpu.bcd.dev-")

    # A claim prepared: one hold through the policy, its own spec before the answer.
    gpu_a, gpu_b = gpus[0], gpus[1]
    uid = "7a0c2f7e-8a6b-4c1d-9e2f-0a1b2c3d4e5f"
    STATE.claims[("ml", "trainer")] = allocated(uid, "trainer", [gpu_a])
    ask = dra.NodePrepareResourcesRequest(claims=[dra.Claim(namespace="ml", uid=uid, name="trainer")])
    # The kubelet keeps its connection: one call of nothing first, so the figures below are
    # the calls' and not the connection's.
    t0 = time.monotonic()
    plugin.NodeUnprepareResources(dra.NodeUnprepareResourcesRequest(claims=[]), timeout=45)
    print(f"figure first_call_connection_ms {(time.monotonic() - t0) * 1000:.1f}")
    times = []
    for _ in range(20):
        t0 = time.monotonic()
        answer = plugin.NodePrepareResources(ask, timeout=45)
        times.append((time.monotonic() - t0) * 1000)
    one = answer.claims[uid]
    check(one.error == "" and [d.device_name for d in one.devices] == [gpu_a], f"prepared: {one}")
    check(list(one.devices[0].cdi_device_ids) == [f"k8s.gpu.bcd.dev/claim={uid}-{gpu_a}"], "the CDI id")
    print(f"figure prepare_ms_median {percentile(times, 50):.1f}")
    print(f"figure prepare_ms_p99 {percentile(times, 99):.1f}")
    spec_file = os.path.join(CDI_RUN, f"k8s.gpu.bcd.dev-claim_{uid}.json")
    with open(spec_file) as f:
        spec = json.load(f)
    check(spec["kind"] == "k8s.gpu.bcd.dev/claim" and spec["cdiVersion"] <= "0.5.0", f"the claim's spec: {spec['kind']} {spec['cdiVersion']}")
    check("NVIDIA_VISIBLE_DEVICES=void" in spec["containerEdits"]["env"], "void in the common edits")
    check([d["name"] for d in spec["devices"]] == [f"{uid}-{gpu_a}"], "one device per allocated device")
    held = bcd("--json", "hold", "list")
    check(f"dra-{uid}" in held.stdout, f"the claim's hold: {held.stdout}")

    # The claim's device stays in the slice (the scheduler allocated it from the claim).
    time.sleep(1.5)
    check(gpu_a in STATE.devices(), "a device a claim has is never dropped")

    # A claim replaced under its name is refused, per claim.
    STATE.claims[("ml", "again")] = allocated("new-uid", "again", [gpu_b])
    answer = plugin.NodePrepareResources(dra.NodePrepareResourcesRequest(claims=[
        dra.Claim(namespace="ml", uid="old-uid", name="again")]), timeout=45)
    check("was deleted and made anew" in answer.claims["old-uid"].error, f"replaced: {answer.claims['old-uid'].error}")

    # An operator hold of another GPU drops it from the slice, with one write.
    uuid_b = devices[gpu_b]["attributes"]["uuid"]["string"]
    writes = len(STATE.writes)
    t0 = time.monotonic()
    check(bcd("hold", "apply", "job", uuid_b).returncode == 0, "an operator hold")
    t = wait("the held GPU leaves the slice", lambda: gpu_b not in STATE.devices(), timeout=5)
    print(f"figure hold_to_slice_ms {(t - t0) * 1000:.0f}")
    time.sleep(0.5)
    print(f"figure writes_per_change {len(STATE.writes) - writes}")
    check(len(STATE.writes) - writes == 1, f"one update for one changed slice: {STATE.writes[writes:]}")
    # A claim of a device held elsewhere is refused.
    STATE.claims[("ml", "b")] = allocated("uid-b", "b", [gpu_b])
    answer = plugin.NodePrepareResources(dra.NodePrepareResourcesRequest(claims=[
        dra.Claim(namespace="ml", uid="uid-b", name="b")]), timeout=45)
    check("held by hold job" in answer.claims["uid-b"].error, f"held elsewhere: {answer.claims['uid-b'].error}")
    t0 = time.monotonic()
    check(bcd("hold", "release", "job").returncode == 0, "released")
    t = wait("the released GPU back in the slice", lambda: gpu_b in STATE.devices(), timeout=5)
    print(f"figure release_to_slice_ms {(t - t0) * 1000:.0f}")

    # The kubelet restarts: it wipes the node's slices, finds the registration socket that is
    # there (bcd does not make it anew), registers again on a new connection and prepares the
    # claims it had again: the slices are published again and the answer is the same.
    inode = os.stat(REG_SOCK).st_ino
    channel.close()
    STATE.wipe()
    wait("the slices published again after a wipe", lambda: gpu_b in STATE.devices(), timeout=5)
    channel = register()
    plugin = dra_grpc.DRAPluginStub(channel)
    check(os.stat(REG_SOCK).st_ino == inode, "the registration socket stays across a kubelet restart")
    again = plugin.NodePrepareResources(ask, timeout=45).claims[uid]
    check(again == one, f"after a kubelet restart the same answer: {again}")

    # A 409 storm, then the API server away and back: caught up.
    STATE.fail = [409] * 4
    check(bcd("hold", "apply", "job2", uuid_b).returncode == 0, "a hold during a 409 storm")
    wait("caught up after the 409 storm", lambda: gpu_b not in STATE.devices(), timeout=10)
    STATE.down = True
    check(bcd("hold", "release", "job2").returncode == 0, "released while the API server is away")
    said = []

    def says_away():
        status = bcd("--json", "status")
        said[:] = [status.stdout[-600:]]
        return "ResourceSlices cannot be published now" in status.stdout
    if not wait("status says the API server is away", says_away, timeout=20, quiet=True):
        check(False, f"status says the API server is away: {said}")
    t0 = time.monotonic()
    STATE.down = False
    t = wait("caught up after the API server came back", lambda: gpu_b in STATE.devices(), timeout=30)
    print(f"figure caught_up_after_return_s {t - t0:.2f}")
    check(not STATE.invalid, f"every object written passed the 1.34 schema: {STATE.invalid}")

    # The health stream: every device; an XID turns exactly its GPU's device UNHEALTHY.
    stream = health_grpc.DRAResourceHealthStub(channel).NodeWatchResources(
        health.NodeWatchResourcesRequest(), timeout=60)
    latest = {}
    updates = queue.Queue()

    def follow():
        try:
            for message in stream:
                updates.put({d.device.device_name: (d.health, d.message) for d in message.devices})
        except grpc.RpcError:
            pass
    threading.Thread(target=follow, daemon=True).start()
    latest = updates.get(timeout=10)
    check(set(latest) == set(STATE.devices()) | set(latest) and all(h == health.HEALTHY for h, _ in latest.values()),
          f"the health stream lists the devices, healthy: {sorted(latest)}")
    victim = by_uuid.get("GPU-30e15e2f-5971-0b16-04be-39a46d1071ce")
    if victim:
        t0 = time.monotonic()
        with open(os.environ["KMSG"], "a") as kmsg:
            kmsg.write("4,9101,9100000000,-;NVRM: Xid (PCI:0000:3a:00): 79, pid=1, name=x, GPU has fallen off the bus.\n")
        while True:
            latest = updates.get(timeout=10)
            if latest.get(victim, (None,))[0] == health.UNHEALTHY:
                break
        print(f"figure xid_to_health_unhealthy_ms {(time.monotonic() - t0) * 1000:.0f}")
        check("79" in latest[victim][1], f"the verdict's reason as the message: {latest[victim][1][:120]}")
        t = wait("the XID's GPU leaves the slice", lambda: victim not in STATE.devices(), timeout=5)
        print(f"figure xid_to_slice_ms {(t - t0) * 1000:.0f}")
        seen = watcher_saw_xid()
        written = seen and first_write_after(seen, lambda names, _: victim not in names)
        check(written, "the watcher's XID line and the slice's write are on record")
        print(f"figure xid_read_to_slice_ms {(written - seen) * 1000:.0f}")

    # A 422: said in status, and not written again until the content changes.
    STATE.reject = 1
    check(bcd("hold", "apply", "job3", uuid_b).returncode == 0, "a hold whose slice update is refused")
    wait("the refused update", lambda: STATE.reject == 0, timeout=5)
    attempts = STATE.attempts
    time.sleep(2.5)
    check(STATE.attempts == attempts, f"a 422 is not tried again while the content is the same ({STATE.attempts - attempts} more)")
    check("refused the node's ResourceSlices" in bcd("--json", "status").stdout, "status says the slices were refused")
    check(bcd("hold", "release", "job3").returncode == 0, "the content changes")
    wait("the refusal cleared", lambda: "refused the node" not in bcd("--json", "status").stdout, timeout=10)

    # bcd node restarts between prepare and unprepare: the claim's record is its hold.
    node.stop()
    STATE.claims.pop(("ml", "trainer"))
    STATE.wipe()
    node.start()
    wait("the registration socket after the node's restart", lambda: os.path.exists(REG_SOCK), timeout=15)
    t0 = time.monotonic()
    wait("the same device names back", lambda: gpu_a in STATE.devices() and gpus[-1] in STATE.devices(), timeout=20)
    print(f"figure names_back_after_restart_s {time.monotonic() - t0:.2f}")
    plugin = dra_grpc.DRAPluginStub(grpc.insecure_channel("unix://" + info.endpoint, options=OPTIONS))
    again = plugin.NodePrepareResources(ask, timeout=45).claims[uid]
    check(again.error == "" and list(again.devices[0].cdi_device_ids) == [f"k8s.gpu.bcd.dev/claim={uid}-{gpu_a}"],
          f"after a restart the same answer, the claim object gone: {again}")

    # Unprepare: the hold and the spec go; an unknown claim succeeds.
    answer = plugin.NodeUnprepareResources(dra.NodeUnprepareResourcesRequest(claims=[
        dra.Claim(namespace="ml", uid=uid, name="trainer"), dra.Claim(namespace="ml", uid="gone", name="x")]), timeout=45)
    check(answer.claims[uid].error == "" and answer.claims["gone"].error == "", "unprepared")
    check(not os.path.exists(spec_file), "the claim's spec is removed")
    check(f"dra-{uid}" not in bcd("--json", "hold", "list").stdout, "the claim's hold is released")

    with open(f"/proc/{node.proc.pid}/status") as f:
        fields = dict(line.split(":", 1) for line in f if ":" in line)
    print(f"figure rss_mib {int(fields['VmRSS'].split()[0]) / 1024:.1f}")
    print(f"figure peak_rss_mib {int(fields['VmHWM'].split()[0]) / 1024:.1f}")

    # The kubelet's registration folder removed (a kubelet reinstall): the socket comes back.
    import shutil
    shutil.rmtree(os.path.dirname(REG_SOCK))
    wait("the registration socket made anew", lambda: os.path.exists(REG_SOCK), timeout=5)

    # On 1.34 with DRADeviceTaints off (its default) bcd asked with a dry run, once a start,
    # and no real write carried a taint; shared devices it does not try before 1.36.
    probes = [sent for sent, _ in STATE.dry_runs]
    check(len(probes) == 2 and all([d["name"] for d in p["spec"]["devices"]] == ["probe-taint"] for p in probes),
          f"one dry run a start, of taints alone: {len(probes)}")
    check(not any("taints" in d or "allowMultipleAllocations" in d for d in STATE.sent),
          "on 1.34 no real write carried a taint or a shared device")


def register():
    """What the kubelet does when the registration socket appears; the DRA plugin's channel."""
    wait("the registration socket", lambda: os.path.exists(REG_SOCK), timeout=15)
    registration = reg_grpc.RegistrationStub(grpc.insecure_channel("unix://" + REG_SOCK, options=OPTIONS))
    info = registration.GetInfo(reg.InfoRequest(), timeout=5)
    registration.NotifyRegistrationStatus(reg.RegistrationStatus(plugin_registered=True), timeout=5)
    return grpc.insecure_channel("unix://" + info.endpoint, options=OPTIONS)


def shared_claim(uid, name, device, share):
    claim = allocated(uid, name, [device], request="slot")
    claim["status"]["allocation"]["devices"]["results"][0].update(
        {"shareID": share, "consumedCapacity": {"slots": "1"}})
    return claim


def shares(start, node):
    """Kubernetes 1.36: a GPU's slots as one shared device, shares prepared, taints."""
    plugin = dra_grpc.DRAPluginStub(register())
    t = wait("the first ResourceSlices", lambda: len(STATE.devices()) > 0, timeout=20)
    print(f"figure first_slices_after_start_s {t - start:.2f}")
    devices = STATE.devices()
    check(not STATE.invalid, f"every object written passed the {SERVER_VERSION} schema: {STATE.invalid}")
    shared = sorted(n for n in devices if n.endswith("-shared"))
    check(len(shared) >= 2 and not any(d["attributes"]["type"]["string"] == "gpu" for d in devices.values()),
          f"GPUs with slots are shared devices, never whole too: {sorted(devices)}")
    check(not any("-slot-" in n for n in devices), "no slot devices beside the shared ones")
    one = devices[shared[0]]
    check(one["allowMultipleAllocations"] is True and one["attributes"]["type"]["string"] == "slot",
          "a shared device may be allocated many times and is of type slot")
    check(one["capacity"]["slots"] == {"value": "2", "requestPolicy": {"default": "1", "validRange": {"min": "1", "max": "1"}}},
          f"its capacity: 2 slots, one a share: {one['capacity']}")
    check("memory" not in one["capacity"], "no memory capacity on a shared device (all of it would be consumed)")
    check(all(len(s["spec"]["devices"]) <= 64 for s in STATE.ours()), "at most 64 devices a slice")
    check(len(STATE.dry_runs) == 1 and {d["name"] for d in STATE.dry_runs[0][0]["spec"]["devices"]}
          == {"probe-taint", "probe-shared"}, "one dry run asked what the server keeps before any write")

    # Two claims, one share each of the same GPU: two slots, the shareIDs answered.
    a, b, c = "5a0c2f7e-8a6b-4c1d-9e2f-0a1b2c3d4e5a", "5b0c2f7e-8a6b-4c1d-9e2f-0a1b2c3d4e5b", \
        "5c0c2f7e-8a6b-4c1d-9e2f-0a1b2c3d4e5c"
    for uid, name, share in ((a, "a", "share-a"), (b, "b", "share-b"), (c, "c", "share-c")):
        STATE.claims[("ml", name)] = shared_claim(uid, name, shared[0], share)
    plugin.NodeUnprepareResources(dra.NodeUnprepareResourcesRequest(claims=[]), timeout=45)
    times = []
    answers = {}
    for uid, name in ((a, "a"), (b, "b")):
        t0 = time.monotonic()
        answers[uid] = plugin.NodePrepareResources(dra.NodePrepareResourcesRequest(claims=[
            dra.Claim(namespace="ml", uid=uid, name=name)]), timeout=45).claims[uid]
        times.append((time.monotonic() - t0) * 1000)
    for slot, (uid, share) in enumerate(((a, "share-a"), (b, "share-b"))):
        got = answers[uid]
        check(got.error == "" and got.devices[0].share_id == share, f"share {share} prepared: {got}")
        check(list(got.devices[0].cdi_device_ids) == [f"k8s.gpu.bcd.dev/claim={uid}-{shared[0]}-{slot}"],
              f"its own CDI device, named by its slot: {list(got.devices[0].cdi_device_ids)}")
    print(f"figure share_prepare_ms_max {max(times):.1f}")
    third = plugin.NodePrepareResources(dra.NodePrepareResourcesRequest(claims=[
        dra.Claim(namespace="ml", uid=c, name="c")]), timeout=45).claims[c]
    check("every slot of it is held" in third.error, f"a third share of two slots is refused: {third.error}")
    held = {h["id"]: h["devices"] for h in json.loads(bcd("--json", "hold", "list").stdout)["holds"]}
    gpu0 = STATE.devices()[shared[0]]["attributes"]["parentUUID"]["string"]
    check(held.get(f"dra-{a}") == [f"{gpu0}::0"] and held.get(f"dra-{b}") == [f"{gpu0}::1"],
          f"the shares hold slots 0 and 1 of their GPU: {held}")
    time.sleep(1)
    kept = STATE.devices().get(shared[0], {})
    check("taints" not in kept and kept.get("capacity", {}).get("slots", {}).get("value") == "2",
          f"a shared device whose slots shares have stays offered, its capacity unchanged: {kept}")

    # An operator hold of another GPU (not the one the XID below hits): its shared device
    # stays, tainted, with one write.
    xid_gpu = "GPU-30e15e2f-5971-0b16-04be-39a46d1071ce"
    parent = lambda name: STATE.devices()[name]["attributes"]["parentUUID"]["string"]  # noqa: E731
    held_name = next(n for n in shared[1:] if parent(n) != xid_gpu)
    uuid = parent(held_name)
    writes = len(STATE.writes)
    t0 = time.monotonic()
    check(bcd("hold", "apply", "job", uuid).returncode == 0, "an operator hold")
    taint = lambda name: (STATE.devices().get(name) or {}).get("taints")  # noqa: E731
    t = wait("the held GPU tainted", lambda: taint(held_name), timeout=5)
    print(f"figure hold_to_taint_ms {(t - t0) * 1000:.0f}")
    got = taint(held_name)[0]
    check((got["key"], got.get("value"), got["effect"]) == ("gpu.bcd.dev/held", "operator", "NoSchedule"),
          f"the taint says why: {got}")
    time.sleep(0.5)
    check(len(STATE.writes) - writes == 1, f"one update for one changed slice: {STATE.writes[writes:]}")
    stamp = got["timeAdded"]

    # An XID: its GPU is tainted (a GPU claims have is never dropped: they are allocated
    # from it); the slice's update sends the held GPU's taint back with the server's time.
    victim = next((n for n in shared if parent(n) == xid_gpu), None)
    check(victim is not None, f"the demo host's GPU {xid_gpu} is offered")
    t0 = time.monotonic()
    with open(os.environ["KMSG"], "a") as kmsg:
        kmsg.write("4,9101,9100000000,-;NVRM: Xid (PCI:0000:3a:00): 79, pid=1, name=x, GPU has fallen off the bus.\n")
    t = wait("the XID's GPU tainted", lambda: taint(victim), timeout=5)
    print(f"figure xid_to_taint_ms {(t - t0) * 1000:.0f}")
    seen = watcher_saw_xid()
    written = seen and first_write_after(seen, lambda _, tainted: victim in tainted)
    check(written, "the watcher's XID line and the slice's write are on record")
    print(f"figure xid_read_to_taint_ms {(written - seen) * 1000:.0f}")
    got = taint(victim)[0]
    check((got["key"], got.get("value")) == ("gpu.bcd.dev/unhealthy", "Xid79"), f"the XID's taint: {got}")
    resent = [d for d in STATE.sent if d["name"] == held_name and d.get("taints")]
    check(len(resent) >= 2 and resent[-1]["taints"][0].get("timeAdded") == stamp,
          f"an update sends a kept taint with the server's timeAdded: {resent[-1:]}")
    check(bcd("hold", "release", "job").returncode == 0, "released")
    wait("the taint gone after the release", lambda: held_name in STATE.devices() and not taint(held_name), timeout=5)
    check(not STATE.invalid, f"every object written passed the {SERVER_VERSION} schema: {STATE.invalid}")

    # The same cluster with both gates off: bcd tries, sees the fields dropped, falls back to
    # slot devices and to leaving out what it does not offer.
    node.stop()
    STATE.gates_off = set(NEWER_GATES)
    STATE.wipe()
    mark = len(STATE.sent)
    node.start()
    register()
    wait("slot devices instead of shared ones", lambda: any("-slot-" in n for n in STATE.devices())
         and not any(n.endswith("-shared") for n in STATE.devices()), timeout=20)
    check(bcd("hold", "apply", "job", uuid).returncode == 0, "an operator hold without taints")
    gpu_of = lambda d: d["attributes"].get("parentUUID", {}).get("string")  # noqa: E731
    wait("the held GPU's slots left out", lambda: not any(gpu_of(d) == uuid for d in STATE.devices().values()),
         timeout=5)
    check(not any("taints" in d for d in STATE.devices().values()), "no taint stays where the server drops them")
    check(not any("taints" in d or "allowMultipleAllocations" in d for d in STATE.sent[mark:]),
          "the dry run told bcd: no real write carried a field the server drops")
    slots0 = {n for n, d in STATE.devices().items() if gpu_of(d) == gpu0 and "-slot-" in n}
    check(not slots0, f"the slots the shares hold are not offered as slot devices: {sorted(slots0)}")
    with open(os.path.join(WORK, "node.log")) as f:
        log = f.read()
    check("dropped" in log and "DRADeviceTaints" in log, "the log says which gate is off")
    check(not STATE.invalid, f"every object written passed the {SERVER_VERSION} schema: {STATE.invalid}")

    # The gates on again, but the dry run never answered: bcd uses neither newer field (a real
    # write of them would not have been checked first), and says why.
    check(bcd("hold", "release", "job").returncode == 0, "released")
    node.stop()
    STATE.gates_off = set()
    STATE.dry_run_fails = True
    STATE.wipe()
    mark = len(STATE.sent)
    node.start()
    register()
    wait("slot devices after a dry run that failed", lambda: any("-slot-" in n for n in STATE.devices()), timeout=20)
    check(bcd("hold", "apply", "job", uuid).returncode == 0, "an operator hold")
    wait("the held GPU's slots left out, not tainted",
         lambda: not any(gpu_of(d) == uuid for d in STATE.devices().values()), timeout=5)
    check(not any("taints" in d or "allowMultipleAllocations" in d for d in STATE.sent[mark:]),
          "no real write carried a newer field after the dry run failed")
    with open(os.path.join(WORK, "node.log")) as f:
        check("did not answer a dry run" in f.read(), "the log says the dry run was not answered")


if __name__ == "__main__":
    main()
