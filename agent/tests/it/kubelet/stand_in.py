"""A stand-in kubelet for bcd's device plugins, speaking the real gRPC APIs with grpcio.

It serves Registration on <plugin dir>/kubelet.sock and PodResources List on its own socket,
and acts as the kubelet does: on Register it refuses a wrong API version or a resource name
that is not an extended resource, dials the plugin back and asks GetDevicePluginOptions
before it answers, then follows the plugin's ListAndWatch stream. Then it runs the scenario
of bcd's device plugins end to end against a running `bcd node` and exits 0 when every check
passed; figures are printed as `figure <name> <ms>` lines.

Its stubs are generated from bcd's own .proto files into a temporary folder (grpcio-tools).
Like the real kubelet, its clients send `:authority` `localhost`: grpcio would send the
socket's path for a `unix:` target, which tonic answers with a protocol error.

Environment: BCD (the bcd binary), BCD_GLOBAL (JSON list of bcd's global options),
PLUGIN_DIR, POD_RESOURCES_SOCKET, PROTO_DIR, KMSG, CDI_DIR, HOST (the fake host, whose
answers' compute processes it removes), HELPER (1 when the real helper
runs, so resets can succeed).
"""

import json
import re
import os
import urllib.request
import subprocess
import sys
import threading
import time
from concurrent import futures

import grpc
from grpc_tools import protoc

PROTO_DIR = os.environ["PROTO_DIR"]
# In the test's own temporary folder (a mkdtemp here was left behind in /tmp by every run).
STUBS = os.environ["STUBS_DIR"]
os.makedirs(STUBS, exist_ok=True)
for proto in ("deviceplugin/v1beta1/api.proto", "podresources/v1/api.proto"):
    if protoc.main(["protoc", f"-I{PROTO_DIR}", f"--python_out={STUBS}",
                    f"--grpc_python_out={STUBS}", os.path.join(PROTO_DIR, proto)]) != 0:
        sys.exit(f"protoc failed on {proto}")
sys.path.insert(0, STUBS)
from deviceplugin.v1beta1 import api_pb2 as dp, api_pb2_grpc as dp_grpc  # noqa: E402
from podresources.v1 import api_pb2 as pr, api_pb2_grpc as pr_grpc  # noqa: E402

PLUGIN_DIR = os.environ["PLUGIN_DIR"]
KUBELET_SOCK = os.path.join(PLUGIN_DIR, "kubelet.sock")
POD_SOCK = os.environ["POD_RESOURCES_SOCKET"]
OPTIONS = [("grpc.default_authority", "localhost")]

GPU = {i: u for i, u in enumerate([
    "GPU-ff1dacfa-2e1a-0504-a88b-76a3118ee48b", "GPU-a4303385-f265-4ffc-ad1b-b0bef156d59a",
    "GPU-30e15e2f-5971-0b16-04be-39a46d1071ce", "GPU-b9036d74-bff6-b565-c003-dc53279ae2bd",
    "GPU-123a1421-1172-b334-14d9-b65b34232574", "GPU-de2e2aa2-202d-33bc-abdc-234d0197d1b8",
    "GPU-8032961a-3b38-ab58-6c00-1b9ef125ea99", "GPU-70823a7e-f12c-9777-a04d-fa2e9a8cf5b8"])}
MIG_4G = "MIG-65db3e42-f991-a575-c20e-8350d31e437c"
MIG_3G = "MIG-0c50056c-bc70-320a-5ed7-3d189e36173c"


def check(cond, what):
    if not cond:
        print(f"FAILED: {what}", flush=True)
        sys.exit(1)
    print(f"ok: {what}", flush=True)


class Kubelet(dp_grpc.RegistrationServicer):
    """Registration, and what each registered plugin streams."""

    def __init__(self):
        self.lock = threading.Condition()
        self.plugins = {}  # resource -> endpoint
        self.devices = {}  # resource -> {id: (health, numa)}
        self.updates = {}  # resource -> [(time, {id: health})]
        self.registrations = []  # (time, resource)

    def Register(self, request, context):
        if request.version != "v1beta1":
            context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                          f"requested device plugin version {request.version} is not supported")
        name = request.resource_name
        domain, _, short = name.partition("/")
        if not short or "." not in domain or domain.endswith("kubernetes.io"):
            context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                          f"invalid name of device plugin socket: {name}")
        channel = grpc.insecure_channel("unix://" + os.path.join(PLUGIN_DIR, request.endpoint),
                                        options=OPTIONS)
        stub = dp_grpc.DevicePluginStub(channel)
        opts = stub.GetDevicePluginOptions(dp.Empty(), timeout=5)
        with self.lock:
            self.plugins[name] = (stub, opts)
            self.registrations.append((time.monotonic(), name))
            self.lock.notify_all()
        threading.Thread(target=self.watch, args=(name, stub), daemon=True).start()
        return dp.Empty()

    def watch(self, name, stub):
        try:
            for response in stub.ListAndWatch(dp.Empty()):
                now = time.monotonic()
                seen = {d.ID: (d.health, [n.ID for n in d.topology.nodes]) for d in response.devices}
                with self.lock:
                    self.devices[name] = seen
                    self.updates.setdefault(name, []).append((now, {k: v[0] for k, v in seen.items()}))
                    self.lock.notify_all()
        except grpc.RpcError:
            pass

    def wait(self, what, pred, timeout=10.0):
        deadline = time.monotonic() + timeout
        with self.lock:
            while not pred():
                left = deadline - time.monotonic()
                if left <= 0:
                    check(False, f"{what} (within {timeout}s); devices: {json.dumps(self.devices)[:2000]}")
                self.lock.wait(left)
        return time.monotonic()

    def health(self, resource, device):
        return self.devices.get(resource, {}).get(device, (None,))[0]


class PodResources(pr_grpc.PodResourcesListerServicer):
    def __init__(self):
        self.pods = {}  # pod name -> [(resource, [device ids])]

    def List(self, request, context):
        out = pr.ListPodResourcesResponse()
        for name, devices in list(self.pods.items()):
            pod = out.pod_resources.add(name=name, namespace="default")
            c = pod.containers.add(name="main")
            for resource, ids in devices:
                c.devices.add(resource_name=resource, device_ids=ids)
        return out


def serve_kubelet():
    kubelet = Kubelet()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    dp_grpc.add_RegistrationServicer_to_server(kubelet, server)
    server.add_insecure_port("unix://" + KUBELET_SOCK)
    server.start()
    return kubelet, server


def bcd(*args):
    cmd = [os.environ["BCD"], *json.loads(os.environ["BCD_GLOBAL"]), *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60)


def allocate(kubelet, resource, ids):
    stub = kubelet.plugins[resource][0]
    req = dp.AllocateRequest(container_requests=[dp.ContainerAllocateRequest(devices_ids=ids)])
    return stub.Allocate(req, timeout=10)


def refused(kubelet, resource, ids):
    try:
        allocate(kubelet, resource, ids)
    except grpc.RpcError as e:
        return e.details()
    return None


def main():
    pods = PodResources()
    pod_server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    pr_grpc.add_PodResourcesListerServicer_to_server(pods, pod_server)
    pod_server.add_insecure_port("unix://" + POD_SOCK)
    pod_server.start()
    kubelet, server = serve_kubelet()

    # Registration of every resource, each with its devices and NUMA nodes.
    resources = {"bcd.dev/gpu": 7, "bcd.dev/gpu-slot": 14,
                 "bcd.dev/mig-4g.40gb": 1, "bcd.dev/mig-3g.40gb": 1}
    kubelet.wait("every resource registered and streamed", lambda: all(
        len(kubelet.devices.get(r, {})) == n for r, n in resources.items()), timeout=30)
    check(all(o.get_preferred_allocation_available for _, o in kubelet.plugins.values()),
          "every plugin offers GetPreferredAllocation")
    check(kubelet.devices["bcd.dev/gpu"][GPU[4]] == ("Healthy", [1]), "GPU 4 Healthy on NUMA 1")
    check(GPU[3] not in kubelet.devices["bcd.dev/gpu"], "GPU 3 is in MIG mode: no whole GPU")
    check(set(kubelet.devices["bcd.dev/mig-4g.40gb"]) == {MIG_4G}, "the 4g.40gb MIG device")

    # A wrong version or resource name is refused, as the real kubelet does.
    reg = dp_grpc.RegistrationStub(grpc.insecure_channel("unix://" + KUBELET_SOCK, options=OPTIONS))
    for bad in (dp.RegisterRequest(version="v1alpha", endpoint="bcd-gpu.sock", resource_name="bcd.dev/gpu"),
                dp.RegisterRequest(version="v1beta1", endpoint="bcd-gpu.sock", resource_name="gpu")):
        try:
            reg.Register(bad, timeout=5)
            check(False, "a bad registration is refused")
        except grpc.RpcError as e:
            check(e.code() == grpc.StatusCode.INVALID_ARGUMENT, f"refused: {e.details()}")

    # Preferred allocation: NVLink first, then one NUMA node.
    stub = kubelet.plugins["bcd.dev/gpu"][0]
    avail = [GPU[i] for i in (0, 1, 4, 5, 6)]
    got = stub.GetPreferredAllocation(dp.PreferredAllocationRequest(container_requests=[
        dp.ContainerPreferredAllocationRequest(available_deviceIDs=avail,
                                               must_include_deviceIDs=[GPU[4]], allocation_size=3)]),
        timeout=5).container_responses[0].deviceIDs
    check(sorted(got) == sorted([GPU[4], GPU[5], GPU[6]]), f"preferred {list(got)} on GPU 4's NUMA node")

    # Allocate: CDI names (NVIDIA's own), a hold and its spec before the answer.
    t0 = time.monotonic()
    answer = allocate(kubelet, "bcd.dev/gpu", [GPU[0]])
    print(f"figure allocate_ms {(time.monotonic() - t0) * 1000:.2f}")
    names = [d.name for d in answer.container_responses[0].cdi_devices]
    check(names == [f"nvidia.com/gpu={GPU[0]}"], f"Allocate answers {names}")
    specs = [f for f in os.listdir(os.environ["CDI_DIR"]) if f.startswith("bcd-k8s-")]
    check(len(specs) == 1, f"the hold's spec is written before the answer: {specs}")
    pods.pods["pod-gpu0"] = [("bcd.dev/gpu", [GPU[0]])]
    mig = allocate(kubelet, "bcd.dev/mig-4g.40gb", [MIG_4G])
    check([d.name for d in mig.container_responses[0].cdi_devices] == [f"nvidia.com/gpu={MIG_4G}"],
          "a MIG device gets NVIDIA's MIG name")
    pods.pods["pod-mig"] = [("bcd.dev/mig-4g.40gb", [MIG_4G])]

    # The metrics say which pod has a GPU (PodResources' names, read every second).
    metrics_url = os.environ.get("METRICS_URL")
    if metrics_url:
        def labelled():
            text = urllib.request.urlopen(metrics_url, timeout=5).read().decode()
            return any(line.startswith("bcd_gpu_temperature_celsius{") and GPU[0] in line
                       and 'pod="pod-gpu0"' in line and 'namespace="default"' in line
                       for line in text.splitlines())
        kubelet.wait("GPU 0's series labelled with its pod", labelled)

    # Two allocations never share a GPU: GPU 0's slots go Unhealthy and are refused.
    kubelet.wait("GPU 0's slots Unhealthy", lambda: kubelet.health("bcd.dev/gpu-slot", f"{GPU[0]}::0") == "Unhealthy")
    why = refused(kubelet, "bcd.dev/gpu-slot", [f"{GPU[0]}::1"])
    check(why is not None and "already held" in why, f"a slot of an allocated GPU is refused: {why}")
    check(kubelet.health("bcd.dev/gpu", GPU[0]) == "Healthy", "its own allocation stays Healthy")

    # A GPU held outside Kubernetes is never allocatable.
    out = bcd("hold", "apply", "job1", GPU[1])
    check(out.returncode == 0, f"bcd hold apply: {out.stderr}")
    kubelet.wait("GPU 1 Unhealthy while job1 holds it", lambda: kubelet.health("bcd.dev/gpu", GPU[1]) == "Unhealthy")
    why = refused(kubelet, "bcd.dev/gpu", [GPU[1]])
    check(why is not None and "job1" in why, f"Allocate of a held GPU is refused naming its holder: {why}")

    # An Xid 119 (GSP RPC timeout: a reset clears it, where an Xid 79 waits for a reboot) on
    # GPU 2 turns exactly that GPU Unhealthy.
    before = dict(kubelet.devices["bcd.dev/gpu"])
    with open(os.environ["KMSG"], "a") as kmsg:
        t0 = time.monotonic()
        kmsg.write("4,9101,9100000000,-;NVRM: Xid (PCI:0000:3a:00): 119, pid=1, name=x, Timeout after 6s of waiting for RPC response from GPU0 GSP!\n")
    t1 = kubelet.wait("GPU 2 Unhealthy after its XID", lambda: kubelet.health("bcd.dev/gpu", GPU[2]) == "Unhealthy")
    print(f"figure xid_to_unhealthy_ms {(t1 - t0) * 1000:.1f}")
    after = kubelet.devices["bcd.dev/gpu"]
    check({k for k in after if after[k] != before[k]} == {GPU[2]}, "exactly that GPU changed")

    # A healthy reset through the real helper turns it Healthy again.
    if os.environ.get("HELPER") == "1":
        t0 = time.monotonic()
        out = bcd("gpu", "reset", GPU[2])
        check(out.returncode == 0, f"bcd gpu reset: {out.stdout}{out.stderr}")
        t1 = kubelet.wait("GPU 2 Healthy after a healthy reset", lambda: kubelet.health("bcd.dev/gpu", GPU[2]) == "Healthy")
        print(f"figure reset_to_healthy_ms {(t1 - t0) * 1000:.1f}")
    else:
        print("skipped: the reset (no bcd-helper)")

    # A pod gone: its release is pending (gpu.reset refused), then released after the grace.
    del pods.pods["pod-gpu0"]
    deadline = time.monotonic() + 10
    while True:
        out = bcd("gpu", "reset", GPU[0])
        if "pending Kubernetes release" in out.stderr:
            break
        if time.monotonic() > deadline:
            check(False, f"gpu.reset refused for a pending release: {out.stderr}")
        time.sleep(0.2)
    check(out.returncode != 0 and "gpu-busy" in out.stderr, f"refused with gpu-busy: {out.stderr.strip()}")
    # GPU 0 still shows compute processes: past the grace period the release stays pending.
    time.sleep(3)
    out = bcd("gpu", "reset", GPU[0])
    check("pending Kubernetes release" in out.stderr, f"still pending while processes run: {out.stderr.strip()}")
    # The processes end (both answers that carry them: the sampler reads either).
    answers = os.path.join(os.environ["HOST"], "answers")
    with open(os.path.join(answers, "compute-apps.out"), "w"):
        pass
    qx = os.path.join(answers, "q-x.out")
    with open(qx) as f:
        text = re.sub(r"<process_info>.*?</process_info>", "", f.read(), flags=re.S)
    with open(qx, "w") as f:
        f.write(text)
    kubelet.wait("GPU 0's slots Healthy once its hold is released",
                 lambda: kubelet.health("bcd.dev/gpu-slot", f"{GPU[0]}::0") == "Healthy", timeout=20)
    specs = [f for f in os.listdir(os.environ["CDI_DIR"]) if f.startswith("bcd-k8s-")]
    check(len(specs) == 1, f"only the MIG pod's spec is left: {specs}")

    # A kubelet restart: plugin sockets removed, kubelet.sock made anew; all register again.
    server.stop(0).wait()
    for f in os.listdir(PLUGIN_DIR):
        os.unlink(os.path.join(PLUGIN_DIR, f))
    t0 = time.monotonic()
    kubelet, server = serve_kubelet()
    t1 = kubelet.wait("every resource registered again", lambda: set(kubelet.plugins) == set(resources), timeout=5)
    print(f"figure reregister_ms {(t1 - t0) * 1000:.0f}")
    check(t1 - t0 < 2.0, "re-registered within 2 s")
    kubelet.wait("streams again", lambda: len(kubelet.devices.get("bcd.dev/gpu", {})) == 7)
    server.stop(0)
    pod_server.stop(0)
    print("all passed", flush=True)


def percentile(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


def bench():
    """The README's figures (packaging/measure-device-plugins runs it; NODE_PID is bcd node)."""
    pods = PodResources()
    pod_server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    pr_grpc.add_PodResourcesListerServicer_to_server(pods, pod_server)
    pod_server.add_insecure_port("unix://" + POD_SOCK)
    pod_server.start()
    kubelet, server = serve_kubelet()
    kubelet.wait("registered", lambda: len(kubelet.devices.get("bcd.dev/gpu", {})) == 7, timeout=30)
    stub = kubelet.plugins["bcd.dev/gpu"][0]
    base, alloc = [], []
    for _ in range(1000):
        t0 = time.perf_counter()
        stub.GetDevicePluginOptions(dp.Empty(), timeout=5)
        base.append((time.perf_counter() - t0) * 1000)
    pods.pods["bench"] = [("bcd.dev/gpu", [GPU[4]])]
    for _ in range(1000):
        t0 = time.perf_counter()
        allocate(kubelet, "bcd.dev/gpu", [GPU[4]])
        alloc.append((time.perf_counter() - t0) * 1000)
    xid, recorded, healthy = [], [], []
    faults = os.path.join(os.environ["DATA_DIR"], "faults.json")

    def identity():
        try:
            st = os.stat(faults)
            return (st.st_ino, st.st_mtime_ns)
        except FileNotFoundError:
            return None
    buses = {5: "ab", 6: "ba", 7: "db"}
    rounds = int(os.environ.get("ROUNDS", "30"))
    for n in range(rounds):
        i = 5 + n % 3
        was = identity()
        with open(os.environ["KMSG"], "a") as kmsg:
            kmsg.write(f"4,{20000 + n},{n}000000,-;NVRM: Xid (PCI:0000:{buses[i]}:00): 119, pid=1, name=x, Timeout after 6s of waiting for RPC response from GPU0 GSP!\n")
            kmsg.flush()
            t0 = time.monotonic()
        # The XID recorded: faults.json is written anew (renamed into place) as it is published.
        while identity() == was:
            time.sleep(0.0002)
        tr = time.monotonic()
        t1 = kubelet.wait("Unhealthy", lambda: kubelet.health("bcd.dev/gpu", GPU[i]) == "Unhealthy")
        xid.append((t1 - t0) * 1000)
        recorded.append((t1 - tr) * 1000)
        t0 = time.monotonic()
        out = bcd("gpu", "reset", GPU[i])
        check(out.returncode == 0, f"reset {out.stderr}")
        t1 = kubelet.wait("Healthy", lambda: kubelet.health("bcd.dev/gpu", GPU[i]) == "Healthy")
        healthy.append((t1 - t0) * 1000)
    rss = hwm = 0
    with open(f"/proc/{os.environ['NODE_PID']}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1])
            if line.startswith("VmHWM:"):
                hwm = int(line.split()[1])
    def show(name, v):
        print(f"{name}: median {percentile(v, 50):.2f} ms, p99 {percentile(v, 99):.2f} ms ({len(v)} runs)")
    show("baseline GetDevicePluginOptions round trip", base)
    show("Allocate (hold, holds.json, spec, CDI names)", alloc)
    show("XID appended to the (polled) fake kernel log -> Unhealthy on the stream", xid)
    show("XID recorded (faults.json renamed into place) -> Unhealthy on the stream", recorded)
    show("bcd gpu reset started -> Healthy on the stream", healthy)
    print(f"bcd node resident memory with the plugins: {rss / 1024:.1f} MiB (peak {hwm / 1024:.1f} MiB)")
    server.stop(0)
    pod_server.stop(0)


if __name__ == "__main__":
    bench() if os.environ.get("MODE") == "bench" else main()
