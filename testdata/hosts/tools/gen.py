#!/usr/bin/env python3
"""Regenerates every fake host under testdata/hosts/ (except the shared replay script).

Usage: python3 testdata/hosts/tools/gen.py   (from anywhere; Python 3.8+, standard library only)

All identifiers (UUIDs, serials, boot ids) are made up, derived from fixed seeds so that a
rerun writes byte-identical files. The element names and their order follow real
nvidia-smi captures of each driver era (see testdata/hosts/README.md); the values are
invented. Edit this file, rerun it, and commit both.
"""
import os
import random
import shutil
import stat

HERE = os.path.dirname(os.path.abspath(__file__))
HOSTS = os.path.dirname(HERE)

NA = "N/A"
DEPRECATED = "Requested functionality has been deprecated"


# ----------------------------------------------------------------------------- ids

def mkrand(seed):
    return random.Random(seed)


def uuid(rng, prefix="GPU"):
    h = "%032x" % rng.getrandbits(128)
    return "%s-%s-%s-%s-%s-%s" % (prefix, h[:8], h[8:12], h[12:16], h[16:20], h[20:])


def plain_uuid(rng):
    return uuid(rng)[4:]


def serial(rng):
    return "1%012d" % rng.randrange(10 ** 12)


# ----------------------------------------------------------------------------- files

def write(path, text, mode=0o644):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", newline="\n") as f:
        f.write(text)
    os.chmod(path, mode)


def link(path, target):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if os.path.lexists(path):
        os.remove(path)
    os.symlink(target, path)


def nvml_bus(addr):
    """0000:18:00.0 -> 00000000:18:00.0 (NVML's form, upper-case hex)."""
    dom, rest = addr.split(":", 1)
    return ("0000" + dom + ":" + rest).upper().replace("0X", "0x")


# ----------------------------------------------------------------------------- XML

class X:
    def __init__(self):
        self.lines = []
        self.depth = 0

    def open(self, tag, attrs=""):
        self.lines.append("\t" * self.depth + "<%s%s>" % (tag, attrs))
        self.depth += 1

    def close(self, tag):
        self.depth -= 1
        self.lines.append("\t" * self.depth + "</%s>" % tag)

    def leaf(self, tag, value):
        self.lines.append("\t" * self.depth + "<%s>%s</%s>" % (tag, value, tag))

    def block(self, tag, pairs):
        self.open(tag)
        for k, v in pairs:
            self.leaf(k, v)
        self.close(tag)

    def text(self, s):
        self.lines.append("\t" * self.depth + s)


def mib(v):
    return NA if v is None else "%d MiB" % v


def watts(v):
    return NA if v is None else "%.2f W" % v


def mhz(v):
    return NA if v is None else "%d MHz" % v


def pct(v):
    return NA if v is None else "%d %%" % v


def gpu_xml(x, g, era, host):
    """era: r470 | r535 | r570 | r616."""
    new = era in ("r570", "r616")
    x.open("gpu", ' id="%s"' % g["bus_id"])
    x.leaf("product_name", g["name"])
    x.leaf("product_brand", g["brand"])
    if era != "r470":
        x.leaf("product_architecture", g["arch_xml"])
    x.leaf("display_mode", DEPRECATED if era == "r616" else "Disabled")
    if era == "r616":
        x.leaf("display_attached", "Yes")
    x.leaf("display_active", "Enabled" if g.get("display") else "Disabled")
    x.leaf("persistence_mode", g["persistence"])
    if era != "r470":
        x.leaf("addressing_mode", g.get("addressing", "None"))
    mig = g.get("mig")
    x.block("mig_mode", [("current_mig", g["mig_mode"]), ("pending_mig", g["mig_mode"])])
    if mig:
        x.open("mig_devices")
        for d in mig:
            x.open("mig_device")
            x.leaf("index", d["index"])
            x.leaf("gpu_instance_id", d["gi"])
            x.leaf("compute_instance_id", d["ci"])
            x.open("device_attributes")
            x.block("shared", [("multiprocessor_count", d["sm"]), ("copy_engine_count", d["ce"]),
                               ("encoder_count", 0), ("decoder_count", d["dec"]),
                               ("ofa_count", d["ofa"]), ("jpg_count", d["jpg"])])
            x.close("device_attributes")
            x.open("ecc_error_count")
            if new:
                x.block("volatile_count", [("sram_uncorrectable_parity", 0),
                                           ("sram_uncorrectable_secded", 0)])
            else:
                x.block("volatile_count", [("sram_uncorrectable", 0)])
            x.close("ecc_error_count")
            x.block("fb_memory_usage", [("total", mib(d["mem"])), ("reserved", mib(0)),
                                        ("used", mib(d["used"])), ("free", mib(d["mem"] - d["used"]))])
            x.block("bar1_memory_usage", [("total", mib(32767)), ("used", mib(0)), ("free", mib(32767))])
            x.close("mig_device")
        x.close("mig_devices")
    else:
        x.open("mig_devices")
        x.text("None")
        x.close("mig_devices")
    x.leaf("accounting_mode", "Disabled")
    x.leaf("accounting_mode_buffer_size", 4000)
    x.block("driver_model", [("current_dm", g.get("dm", NA)), ("pending_dm", g.get("dm", NA))])
    x.leaf("serial", g["serial"])
    x.leaf("uuid", g["uuid"])
    x.leaf("minor_number", g["minor"])
    x.leaf("vbios_version", g["vbios"])
    x.leaf("multigpu_board", "No")
    x.leaf("board_id", g["board_id"])
    if era == "r470":
        # R470 has no board_part_number; its gpu_part_number carries the board's part number.
        x.leaf("gpu_part_number", g["board_part"])
    else:
        x.leaf("board_part_number", g["board_part"])
        x.leaf("gpu_part_number", g["gpu_part"])
    if era != "r470":
        x.leaf("gpu_fru_part_number", NA)
    if new:
        x.block("platformInfo", [("chassis_serial_number", NA), ("slot_number", NA),
                                 ("tray_index", NA), ("host_id", NA), ("peer_type", NA),
                                 ("module_id", g["module_id"]), ("gpu_fabric_guid", g.get("fabric_guid", NA))])
    else:
        x.leaf("gpu_module_id", g["module_id"])
    x.block("inforom_version", [("img_version", g["inforom"]), ("oem_object", "2.1"),
                                ("ecc_object", g.get("ecc_object", NA)), ("pwr_object", NA)])
    if new:
        x.block("inforom_bbx_flush", [("latest_timestamp", NA), ("latest_duration", NA)])
    x.block("gpu_operation_mode", [("current_gom", NA), ("pending_gom", NA)])
    if new:
        x.leaf("c2c_mode", "Disabled" if era == "r570" and g["arch_xml"] == "Hopper" else NA)
    virt = [("virtualization_mode", g.get("virt", "None")), ("host_vgpu_mode", NA)]
    if new:
        virt.append(("vgpu_heterogeneous_mode", NA))
    x.block("gpu_virtualization_mode", virt)
    if era != "r470":
        reset = DEPRECATED if era == "r616" else "No"
        x.block("gpu_reset_status", [("reset_required", reset), ("drain_and_reset_recommended", reset)])
    if new:
        x.leaf("gpu_recovery_action", "None")
    x.leaf("gsp_firmware_version", g.get("gsp", NA))
    x.block("ibmnpu", [("relaxed_ordering_mode", NA)])
    x.open("pci")
    bus = g["bus_id"]
    x.leaf("pci_bus", bus[9:11])
    x.leaf("pci_device", bus[12:14])
    x.leaf("pci_domain", bus[4:8])
    if new:
        x.leaf("pci_base_class", 3)
        x.leaf("pci_sub_class", 2 if g.get("class3d", True) else 0)
    x.leaf("pci_device_id", g["device_id"].upper() + "10DE")
    x.leaf("pci_bus_id", bus)
    x.leaf("pci_sub_system_id", g["subsys"])
    x.open("pci_gpu_link_info")
    gen = [("max_link_gen", g["gen"]), ("current_link_gen", g["gen"])]
    if era != "r470":
        gen += [("device_current_link_gen", g["gen"]), ("max_device_link_gen", g["gen"]),
                ("max_host_link_gen", g["gen"])]
    x.block("pcie_gen", gen)
    x.block("link_widths", [("max_link_width", "%dx" % g["max_width"]),
                            ("current_link_width", "%dx" % g["cur_width"])])
    x.close("pci_gpu_link_info")
    x.block("pci_bridge_chip", [("bridge_chip_type", NA), ("bridge_chip_fw", NA)])
    x.leaf("replay_counter", 0)
    x.leaf("replay_rollover_counter", 0)
    x.leaf("tx_util", "%d KB/s" % g.get("tx", 0))
    x.leaf("rx_util", "%d KB/s" % g.get("rx", 0))
    if era != "r470":
        x.leaf("atomic_caps_outbound", NA)
        x.leaf("atomic_caps_inbound", NA)
    x.close("pci")
    x.leaf("fan_speed", g.get("fan", NA))
    x.leaf("performance_state", g["pstate"])
    word = "throttle" if era == "r470" else "event"
    reasons = ["gpu_idle", "applications_clocks_setting", "sw_power_cap", "hw_slowdown",
               "hw_thermal_slowdown", "hw_power_brake_slowdown", "sync_boost",
               "sw_thermal_slowdown", "display_clocks_setting"]
    x.block("clocks_%s_reasons" % word,
            [("clocks_%s_reason_%s" % (word, r),
              "Active" if (r == "gpu_idle" and g["pstate"] != "P0") else "Not Active") for r in reasons])
    if new:
        x.leaf("sparse_operation_mode", NA)
    fb = [("total", mib(g["mem_total"]))]
    if era != "r470":
        fb.append(("reserved", mib(g["mem_reserved"])))
    fb += [("used", mib(g["mem_used"])), ("free", mib(g["mem_total"] - g["mem_reserved"] - g["mem_used"]))]
    x.block("fb_memory_usage", fb)
    x.block("bar1_memory_usage", [("total", mib(g["bar1"])), ("used", mib(1)), ("free", mib(g["bar1"] - 1))])
    if era != "r470":
        x.block("cc_protected_memory_usage", [("total", mib(0)), ("used", mib(0)), ("free", mib(0))])
    x.leaf("compute_mode", g["compute_mode"])
    util = [("gpu_util", pct(g["util_gpu"])), ("memory_util", pct(g["util_mem"])),
            ("encoder_util", pct(None if mig else 0)), ("decoder_util", pct(None if mig else 0))]
    if era != "r470":
        util += [("jpeg_util", pct(None if mig else 0)), ("ofa_util", pct(None if mig else 0))]
    x.block("utilization", util)
    for tag in ("encoder_stats", "fbc_stats"):
        x.block(tag, [("session_count", 0), ("average_fps", 0), ("average_latency", 0)])
    if new:
        x.block("dram_encryption_mode", [("current_dram_encryption", NA), ("pending_dram_encryption", NA)])
    x.block("ecc_mode", [("current_ecc", g["ecc"]), ("pending_ecc", g["ecc"])])
    e = g["ecc_counts"]  # dict of counters or None
    v = (lambda k: NA if e is None else e.get(k, 0))
    x.open("ecc_errors")
    if era == "r470":
        for scope in ("volatile", "aggregate"):
            x.open(scope)
            for kind in ("single_bit", "double_bit"):
                dm = v("%s_%s_dram" % (scope, kind))
                x.block(kind, [("device_memory", dm), ("register_file", v("x")), ("l1_cache", v("x")),
                               ("l2_cache", v("x")), ("texture_memory", v("x")), ("texture_shm", v("x")),
                               ("cbu", v("x")), ("total", dm)])
            x.close(scope)
    elif era == "r535":
        for scope in ("volatile", "aggregate"):
            x.block(scope, [("sram_correctable", v(scope + "_sram_corr")),
                            ("sram_uncorrectable", v(scope + "_sram_unc")),
                            ("dram_correctable", v(scope + "_dram_corr")),
                            ("dram_uncorrectable", v(scope + "_dram_unc"))])
    else:
        for scope in ("volatile", "aggregate"):
            pairs = [("sram_correctable", v(scope + "_sram_corr")),
                     ("sram_uncorrectable_parity", v(scope + "_sram_parity")),
                     ("sram_uncorrectable_secded", v(scope + "_sram_secded")),
                     ("dram_correctable", v(scope + "_dram_corr")),
                     ("dram_uncorrectable", v(scope + "_dram_unc"))]
            if scope == "aggregate":
                pairs.append(("sram_threshold_exceeded", NA if e is None else "No"))
            x.block(scope, pairs)
        x.block("aggregate_uncorrectable_sram_sources",
                [("sram_l2", v("x")), ("sram_sm", v("x")), ("sram_microcontroller", v("x")),
                 ("sram_pcie", v("x")), ("sram_other", v("x"))])
    x.close("ecc_errors")
    x.open("retired_pages")
    retired = g.get("retired", NA)
    x.block("multiple_single_bit_retirement", [("retired_count", retired), ("retired_pagelist", NA if retired == NA else "")])
    x.block("double_bit_retirement", [("retired_count", retired), ("retired_pagelist", NA if retired == NA else "")])
    if era != "r616":
        x.leaf("pending_blacklist", "No" if retired != NA else NA)
    x.leaf("pending_retirement", "No" if retired != NA else NA)
    x.close("retired_pages")
    rr = g.get("remap")
    if rr is None:
        x.leaf("remapped_rows", NA)
    else:
        x.open("remapped_rows")
        x.leaf("remapped_row_corr", rr[0])
        x.leaf("remapped_row_unc", rr[1])
        x.leaf("remapped_row_pending", rr[2])
        x.leaf("remapped_row_failure", rr[3])
        x.block("row_remapper_histogram", [
            ("row_remapper_histogram_max", "%d bank(s)" % (2558 - rr[0] - rr[1])),
            ("row_remapper_histogram_high", "%d bank(s)" % (rr[0] + rr[1])),
            ("row_remapper_histogram_partial", "0 bank(s)"),
            ("row_remapper_histogram_low", "0 bank(s)"),
            ("row_remapper_histogram_none", "0 bank(s)")])
        x.close("remapped_rows")
    temp = [("gpu_temp", "%d C" % g["temp"])]
    if era != "r470":
        temp.append(("gpu_temp_tlimit", g.get("tlimit", NA)))
    temp += [("gpu_temp_max_threshold", "%d C" % (g["tmax"] + 5)), ("gpu_temp_slow_threshold", "%d C" % (g["tmax"] + 2)),
             ("gpu_temp_max_gpu_threshold", "%d C" % g["tmax"]), ("gpu_target_temperature", g.get("target_temp", NA)),
             ("memory_temp", g.get("mem_temp", NA)), ("gpu_temp_max_mem_threshold", g.get("mem_tmax", NA))]
    x.block("temperature", temp)
    x.block("supported_gpu_target_temp", [("gpu_target_temp_min", NA), ("gpu_target_temp_max", NA)])
    pstate = DEPRECATED if era == "r616" else g["pstate"]
    if era == "r470":
        x.block("power_readings", [("power_state", g["pstate"]), ("power_management", "Supported"),
                                   ("power_draw", watts(g["power"])), ("power_limit", watts(g["plimit"])),
                                   ("default_power_limit", watts(g["plimit"])),
                                   ("enforced_power_limit", watts(g["plimit"])),
                                   ("min_power_limit", watts(g["pmin"])), ("max_power_limit", watts(g["plimit"]))])
    elif era == "r535":
        lim = [("current_power_limit", watts(g["plimit"])), ("requested_power_limit", watts(g["plimit"])),
               ("default_power_limit", watts(g["plimit"])), ("min_power_limit", watts(g["pmin"])),
               ("max_power_limit", watts(g["plimit"]))]
        x.block("gpu_power_readings", [("power_state", pstate), ("power_draw", watts(g["power"]))] + lim)
        x.block("module_power_readings", [("power_state", pstate), ("power_draw", NA)] + [(k, NA) for k, _ in lim])
    else:
        lim = [("current_power_limit", watts(g["plimit"])), ("requested_power_limit", watts(g["plimit"])),
               ("default_power_limit", watts(g["plimit"])), ("min_power_limit", watts(g["pmin"])),
               ("max_power_limit", watts(g["plimit"]))]
        x.block("gpu_power_readings", [("power_state", pstate), ("average_power_draw", watts(g["power"] - 0.31)),
                                       ("instant_power_draw", watts(g["power"]))] + lim)
        x.block("gpu_memory_power_readings", [("average_power_draw", NA), ("instant_power_draw", NA)])
        x.block("module_power_readings", [("power_state", pstate), ("average_power_draw", NA),
                                          ("instant_power_draw", NA)] + [(k, NA) for k, _ in lim])
        x.leaf("power_smoothing", NA)
        x.block("power_profiles", [("power_profile_requested_profiles", NA),
                                   ("power_profile_enforced_profiles", NA)])
    x.block("clocks", [("graphics_clock", mhz(g["sm_clock"])), ("sm_clock", mhz(g["sm_clock"])),
                       ("mem_clock", mhz(g["mem_clock"])), ("video_clock", mhz(g["video_clock"]))])
    app = DEPRECATED if era == "r616" else mhz(g["max_sm"])
    appm = DEPRECATED if era == "r616" else mhz(g["mem_clock"])
    x.block("applications_clocks", [("graphics_clock", app), ("mem_clock", appm)])
    x.block("default_applications_clocks", [("graphics_clock", app), ("mem_clock", appm)])
    if era != "r470":
        x.block("deferred_clocks", [("mem_clock", NA)])
    x.block("max_clocks", [("graphics_clock", mhz(g["max_sm"])), ("sm_clock", mhz(g["max_sm"])),
                           ("mem_clock", mhz(g["mem_clock"])), ("video_clock", mhz(g["max_video"]))])
    x.block("max_customer_boost_clocks", [("graphics_clock", mhz(g["max_sm"]))])
    x.block("clock_policy", [("auto_boost", NA), ("auto_boost_default", NA)])
    x.block("voltage", [("graphics_volt", DEPRECATED if era == "r616" else g.get("volt", NA))])
    if new:
        f = g.get("fabric")
        x.open("fabric")
        if f:
            x.leaf("state", "Completed")
            x.leaf("status", "Success")
            x.leaf("cliqueId", f[1])
            x.leaf("clusterUuid", f[0])
            x.block("health", [("bandwidth", "Full"), ("route_recovery_in_progress", "False"),
                               ("route_unhealthy", "False"), ("access_timeout_recovery", "False")])
        else:
            for k in ("state", "status", "cliqueId", "clusterUuid"):
                x.leaf(k, NA)
            x.block("health", [("bandwidth", NA), ("route_recovery_in_progress", NA),
                               ("route_unhealthy", NA), ("access_timeout_recovery", NA)])
        x.close("fabric")
    elif era == "r535":
        x.block("fabric", [("state", NA), ("status", NA)])
    x.open("supported_clocks")
    if not mig and era != "r616":
        x.open("supported_mem_clock")
        x.leaf("value", mhz(g["mem_clock"]))
        for c in range(g["max_sm"], g["max_sm"] - 60, -15):
            x.leaf("supported_graphics_clock", mhz(c))
        x.close("supported_mem_clock")
    x.close("supported_clocks")
    x.open("processes")
    for p in g.get("procs", []):
        x.block("process_info", [("gpu_instance_id", p.get("gi", NA)), ("compute_instance_id", p.get("ci", NA)),
                                 ("pid", p["pid"]), ("type", p["type"]), ("process_name", p["name"]),
                                 ("used_memory", mib(p["mem"]))])
    x.close("processes")
    x.open("accounted_processes")
    x.close("accounted_processes")
    if new:
        x.block("capabilities", [("egm", "disabled")])
    x.close("gpu")


def qx(host, era, dtd, timestamp):
    x = X()
    x.lines += ['<?xml version="1.0" ?>', '<!DOCTYPE nvidia_smi_log SYSTEM "%s">' % dtd, "<nvidia_smi_log>"]
    x.depth = 1
    x.leaf("timestamp", timestamp)
    if era == "r616":
        x.leaf("driver_version", "%s [Deprecated; will be removed in CUDA 14.0. Use KMD Version instead]" % host["driver"])
        x.leaf("cuda_version", "%s [Deprecated; will be removed in CUDA 14.0. Use CUDA UMD Version instead]" % host["cuda"])
        x.leaf("kmd_version", host["driver"])
        x.leaf("cuda_umd_version", host["cuda"])
    else:
        x.leaf("driver_version", host["driver"])
        x.leaf("cuda_version", host["cuda"])
    x.leaf("attached_gpus", len(host["smi_gpus"]))
    for g in host["smi_gpus"]:
        gpu_xml(x, g, era, host)
    x.depth = 0
    x.lines.append("")
    x.lines.append("</nvidia_smi_log>")
    return "\n".join(x.lines) + "\n"


# ----------------------------------------------------------------------------- text answers

def list_L(host):
    out = []
    for g in host["smi_gpus"]:
        out.append("GPU %d: %s (UUID: %s)" % (g["index"], g["name"], g["uuid"]))
        for d in g.get("mig") or []:
            out.append("  MIG %-12sDevice %2d: (UUID: %s)" % (d["profile"], d["index"], d["uuid"]))
    return "\n".join(out) + "\n"


LEGEND = """
Legend:

  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)
  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node
  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)
  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)
  PIX  = Connection traversing at most a single PCIe bridge
  NV#  = Connection traversing a bonded set of # NVLinks
"""


def topo(host, link, nics=(), gpu_numa_id=True):
    """link(i, j) -> cell between GPUs; nics: list of (name, cells-vs-gpus)."""
    gs = host["smi_gpus"]
    cols = ["GPU%d" % g["index"] for g in gs] + ["NIC%d" % i for i in range(len(nics))]
    tail = ["CPU Affinity", "NUMA Affinity"] + (["GPU NUMA ID"] if gpu_numa_id else [])
    out = ["\t\033[4m" + "\t".join(cols + tail) + "\033[0m"]
    for i, g in enumerate(gs):
        cells = [" X " if i == j else link(i, j) for j in range(len(gs))]
        cells += [n[1][i] for n in nics]
        extra = [g["cpus"], str(g["numa"])] + (["", "N/A"] if gpu_numa_id else [])
        out.append("\t".join(["GPU%d" % g["index"]] + cells + extra))
    for k, n in enumerate(nics):
        cells = [n[1][i] for i in range(len(gs))]
        cells += [" X " if k == m else "SYS" for m in range(len(nics))]
        out.append("\t".join(["NIC%d" % k] + cells))
    text = "\n".join(out) + "\n" + LEGEND
    if nics:
        text += "\nNIC Legend:\n\n" + "".join("  NIC%d: %s\n" % (k, n[0]) for k, n in enumerate(nics))
    return text + "\n"


MIG_REFUSAL = "Nvlink queries are not supported for Devices in MIG mode"


def nvlink_s(host, nlinks, speed):
    out = []
    for g in host["smi_gpus"]:
        out.append("GPU %d: %s (UUID: %s)" % (g["index"], g["name"], g["uuid"]))
        if g.get("mig"):
            out.append(MIG_REFUSAL)
        else:
            out += ["\t Link %d: %s GB/s" % (l, speed) for l in range(nlinks)]
    return "\n".join(out) + "\n"


def nvlink_R(host, remote):
    """remote(gpu, link) -> (bus id, remote link)."""
    out = []
    for g in host["smi_gpus"]:
        out.append("GPU %d: %s (UUID: %s)" % (g["index"], g["name"], g["uuid"]))
        if g.get("mig"):
            out.append(MIG_REFUSAL)
        else:
            for l in range(g["nvlinks"]):
                bus, rl = remote(g, l)
                out.append("\t Link %d: Remote Device %s: Link %d" % (l, bus, rl))
    return "\n".join(out) + "\n"


LGIP_HEAD = """+-----------------------------------------------------------------------------+
| GPU instance profiles:                                                      |
| GPU   Name             ID    Instances   Memory     P2P    SM    DEC   ENC  |
|                              Free/Total   GiB              CE    JPEG  OFA  |
|=============================================================================|
"""
LGIP_SEP = "+-----------------------------------------------------------------------------+\n"


def lgip(host, profiles):
    """profiles(g) -> list of (name, id, free, total, gib, sm, dec, enc, ce, jpeg, ofa)."""
    out = LGIP_HEAD
    for g in host["smi_gpus"]:
        if not g.get("mig"):
            continue
        for (name, pid, free, total, gib, sm, dec, enc, ce, jpeg, ofa) in profiles(g):
            out += "|%4d  MIG %-13s%3d     %3s        %-11s%-5s%4d%6d%6d   |\n" % (
                g["index"], name, pid, "%d/%d" % (free, total), "%.2f" % gib, "No", sm, dec, enc)
            out += "|" + " " * 58 + "%4d%6d%6d   |\n" % (ce, jpeg, ofa)
            out += LGIP_SEP
    return out


def samples(host):
    out = []
    for g in host["smi_gpus"]:
        mig = bool(g.get("mig"))
        na = "[N/A]"
        out.append(", ".join([
            g["uuid"], str(g["mem_total"]), str(g["mem_used"]), str(g["mem_reserved"]),
            str(g["mem_total"] - g["mem_reserved"] - g["mem_used"]),
            na if g["util_gpu"] is None else str(g["util_gpu"]),
            na if g["util_mem"] is None else str(g["util_mem"]),
            str(g["temp"]), "%.2f" % g["power"], "%.2f" % g["plimit"],
            str(g["sm_clock"]), str(g["mem_clock"]), g["pstate"],
            "Enabled" if mig else ("[N/A]" if g["mig_mode"] == NA else "Disabled")]))
    return "\n".join(out) + "\n"


def compute_apps(host):
    out = [g["uuid"] for g in host["smi_gpus"] for p in g.get("procs", []) if "C" in p["type"]]
    return "".join(u + "\n" for u in out)


# ----------------------------------------------------------------------------- procfs / sysfs / dev

def proc_version(driver, date, gcc):
    return ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  %s  %s\n"
            "GCC version:  gcc version %s \n" % (driver, date, gcc))


def information(g, era):
    lines = ["Model: \t\t %s" % g["name"], "IRQ:   \t\t %d" % g["irq"], "GPU UUID: \t %s" % g["uuid"],
             "Video BIOS: \t %s" % g["vbios"].lower(), "Bus Type: \t PCIe", "DMA Size: \t %d bits" % g["dma"],
             "DMA Mask: \t 0x%x" % ((1 << g["dma"]) - 1), "Bus Location: \t %s" % g["addr"],
             "Device Minor: \t %d" % g["minor"]]
    if era != "r470":
        lines.append("GPU Firmware: \t %s" % g.get("gsp", NA))
    lines.append("GPU Excluded:\t No")
    return "\n".join(lines) + "\n"


MOD = "%s %d %d %s Live 0x0000000000000000%s\n"


def modules(nvidia=True, nouveau=False, vfio=False):
    out = ""
    if nvidia:
        out += MOD % ("nvidia_uvm", 2076672, 4, "-", " (POE)")
        out += MOD % ("nvidia_drm", 135168, 0, "-", " (POE)")
        out += MOD % ("nvidia_modeset", 1638400, 1, "nvidia_drm,", " (POE)")
        out += MOD % ("nvidia", 11698176, 92, "nvidia_uvm,nvidia_modeset,", " (POE)")
    if nouveau:
        out += MOD % ("nouveau", 3096576, 0, "-", "")
        out += MOD % ("drm_ttm_helper", 12288, 1, "nouveau,", "")
        out += MOD % ("ttm", 110592, 2, "nouveau,drm_ttm_helper,", "")
        out += MOD % ("mxm_wmi", 12288, 1, "nouveau,", "")
    if vfio:
        out += MOD % ("vfio_pci", 16384, 0, "-", "")
        out += MOD % ("vfio_pci_core", 94208, 1, "vfio_pci,", "")
        out += MOD % ("vfio_iommu_type1", 49152, 0, "-", "")
        out += MOD % ("vfio", 69632, 3, "vfio_pci_core,vfio_iommu_type1,vfio_pci,", "")
    out += MOD % ("kvm_intel", 487424, 0, "-", "")
    out += MOD % ("kvm", 1437696, 1, "kvm_intel,", "")
    out += MOD % ("drm_kms_helper", 270336, 1, "nvidia_drm," if nvidia else "-", "")
    return out


SPEED = {3: "8.0 GT/s PCIe", 4: "16.0 GT/s PCIe", 5: "32.0 GT/s PCIe"}


def pci_function(root, f):
    """f: addr, root_port (pci0000:NN), vendor, device, subsys_vendor, subsys_device, class,
    numa, cpus, driver (or None), group, gen, max_width, cur_width."""
    dev_rel = "devices/%s/%s" % (f["root_port"], f["addr"])
    d = os.path.join(root, "sys", dev_rel)
    write(os.path.join(d, "vendor"), "%s\n" % f["vendor"])
    write(os.path.join(d, "device"), "%s\n" % f["device"])
    write(os.path.join(d, "subsystem_vendor"), "%s\n" % f.get("subsys_vendor", f["vendor"]))
    write(os.path.join(d, "subsystem_device"), "%s\n" % f.get("subsys_device", "0x0000"))
    write(os.path.join(d, "class"), "%s\n" % f["class"])
    write(os.path.join(d, "revision"), "0xa1\n")
    write(os.path.join(d, "numa_node"), "%d\n" % f["numa"])
    write(os.path.join(d, "local_cpulist"), "%s\n" % f["cpus"])
    write(os.path.join(d, "driver_override"), "%s\n" % f.get("override", "(null)"))
    if "gen" in f:
        write(os.path.join(d, "current_link_speed"), SPEED[f["gen"]] + "\n")
        write(os.path.join(d, "max_link_speed"), SPEED[f["gen"]] + "\n")
        write(os.path.join(d, "current_link_width"), "%d\n" % f["cur_width"])
        write(os.path.join(d, "max_link_width"), "%d\n" % f["max_width"])
    link(os.path.join(root, "sys/bus/pci/devices", f["addr"]), "../../../" + dev_rel)
    if f.get("driver"):
        link(os.path.join(d, "driver"), "../../../bus/pci/drivers/" + f["driver"])
        link(os.path.join(root, "sys/bus/pci/drivers", f["driver"], f["addr"]), "../../../../" + dev_rel)
    if f.get("group") is not None:
        link(os.path.join(d, "iommu_group"), "../../../kernel/iommu_groups/%d" % f["group"])
        link(os.path.join(root, "sys/kernel/iommu_groups/%d/devices" % f["group"], f["addr"]),
             "../../../../" + dev_rel)


def pci_drivers(root, names):
    write(os.path.join(root, "sys/bus/pci/drivers_probe"), "")
    write(os.path.join(root, "sys/bus/pci/rescan"), "")
    for n in names:
        for f in ("bind", "unbind", "new_id", "remove_id"):
            write(os.path.join(root, "sys/bus/pci/drivers", n, f), "")


def dev_files(root, names):
    for n in names:
        write(os.path.join(root, "dev", n), "", 0o644)


def boot_id(root, rng):
    write(os.path.join(root, "proc/sys/kernel/random/boot_id"), plain_uuid(rng) + "\n")


def answers(hostdir, files):
    for name, content in files.items():
        if isinstance(content, int):
            write(os.path.join(hostdir, "answers", name), "%d\n" % content)
        else:
            write(os.path.join(hostdir, "answers", name), content)


def wrapper(hostdir):
    write(os.path.join(hostdir, "bin/nvidia-smi"),
          "#!/bin/sh\n"
          "# Fake nvidia-smi: replays this host's answers/ (see ../../README.md).\n"
          "case $0 in */*) here=${0%/*} ;; *) here=. ;; esac\n"
          "exec \"$here/../../replay-nvidia-smi\" \"$here/../answers\" \"$@\"\n", 0o755)


def fresh(name):
    d = os.path.join(HOSTS, name)
    for sub in ("root", "answers", "bin"):
        p = os.path.join(d, sub)
        if os.path.isdir(p):
            shutil.rmtree(p)
    return d


def gpu_sysfs(root, gs, driver="nvidia"):
    for g in gs:
        pci_function(root, {
            "addr": g["addr"], "root_port": g["root_port"], "vendor": "0x10de",
            "device": "0x" + g["device_id"].lower(), "subsys_vendor": "0x10de",
            "subsys_device": "0x" + g["subsys"][:4].lower(), "class": g.get("class", "0x030200"),
            "numa": g["numa"], "cpus": g["cpus"], "driver": g.get("driver", driver),
            "group": g["group"], "gen": g["gen"], "max_width": g["max_width"],
            "cur_width": g.get("sys_cur_width", g["cur_width"])})


def proc_gpus(root, gs, era):
    for g in gs:
        write(os.path.join(root, "proc/driver/nvidia/gpus", g["addr"], "information"), information(g, era))


# ----------------------------------------------------------------------------- hosts

H100_PROFILES = [  # name, id, total, gib, sm, dec, enc, ce, jpeg, ofa, slices
    ("1g.10gb", 19, 7, 9.75, 16, 1, 0, 1, 1, 0, 1),
    ("1g.10gb+me", 20, 1, 9.75, 16, 1, 0, 1, 1, 1, 1),
    ("1g.20gb", 15, 4, 19.62, 26, 1, 0, 1, 1, 0, 2),
    ("2g.20gb", 14, 3, 19.62, 32, 2, 0, 2, 2, 0, 2),
    ("3g.40gb", 9, 2, 39.50, 60, 3, 0, 3, 3, 0, 4),
    ("4g.40gb", 5, 1, 39.50, 64, 4, 0, 4, 4, 0, 4),
    ("7g.80gb", 0, 1, 79.25, 132, 7, 0, 8, 7, 1, 8),
]
A100_PROFILES = [
    ("1g.10gb", 19, 7, 9.75, 14, 0, 0, 1, 0, 0, 1),
    ("1g.10gb+me", 20, 1, 9.75, 14, 1, 0, 1, 1, 1, 1),
    ("1g.20gb", 15, 4, 19.62, 14, 1, 0, 1, 0, 0, 2),
    ("2g.20gb", 14, 3, 19.62, 28, 1, 0, 2, 0, 0, 2),
    ("3g.40gb", 9, 2, 39.50, 42, 2, 0, 3, 0, 0, 4),
    ("4g.40gb", 5, 1, 39.50, 56, 2, 0, 4, 0, 0, 4),
    ("7g.80gb", 0, 1, 79.25, 98, 5, 0, 7, 1, 1, 8),
]


def profile_rows(table, free):
    return [(n, i, free.get(n, 0), t, gib, sm, dec, enc, ce, jp, ofa)
            for (n, i, t, gib, sm, dec, enc, ce, jp, ofa, _) in table]


def mig_dev(rng, table, index, profile, gi, used=13):
    p = [r for r in table if r[0] == profile][0]
    return {"index": index, "profile": profile, "gi": gi, "ci": 0, "uuid": uuid(rng, "MIG"),
            "mem": int(round(p[3] * 1024)) - 128, "used": used, "sm": p[4], "dec": p[5],
            "ce": p[7], "jpg": p[8], "ofa": p[9]}


def base_gpu(**kw):
    g = {"brand": "NVIDIA", "persistence": "Enabled", "compute_mode": "Default", "ecc": "Enabled",
         "mig_mode": "Disabled", "pstate": "P0", "dma": 52, "board_id": None, "inforom": "G520.0200.00.05"}
    g.update(kw)
    return g


def hgx_h100():
    name = "hgx-h100"
    d = fresh(name)
    root = os.path.join(d, "root")
    rng = mkrand("bcd-hgx-h100")
    drv, cuda = "570.133.20", "12.8"
    buses = ["18", "2a", "3a", "5d", "9a", "ab", "ba", "db"]
    cluster = plain_uuid(rng)
    gs = []
    for i, b in enumerate(buses):
        addr = "0000:%s:00.0" % b
        numa = 0 if i < 4 else 1
        g = base_gpu(
            index=i, name="NVIDIA H100 80GB HBM3", arch_xml="Hopper", uuid=uuid(rng), serial=serial(rng),
            addr=addr, bus_id=nvml_bus(addr), root_port="pci0000:%s" % ("%02x" % (int(b, 16) - 1)),
            minor=i, vbios="96.00.99.00.01", board_id="0x%s00" % b, board_part="692-2G520-0200-000",
            gpu_part="2330-885-A1", module_id=[2, 4, 3, 1, 7, 5, 8, 6][i], inforom="G520.0200.00.05",
            ecc_object="7.16", gsp=drv, device_id="2330", subsys="16C110DE", gen=5, max_width=16,
            cur_width=16, mem_total=81559, mem_reserved=479, mem_used=0, bar1=131072,
            util_gpu=0, util_mem=0, temp=31 + i, tmax=87, tlimit="%d C" % (56 - i), mem_temp="%d C" % (38 + i),
            mem_tmax="95 C", power=69.5 + 3.1 * i, plimit=700.0, pmin=200.0, sm_clock=345, mem_clock=2619,
            video_clock=765, max_sm=1980, max_video=1545, volt="670.000 mV", numa=numa,
            cpus="0-55,112-167" if numa == 0 else "56-111,168-223", irq=0, group=20 + i * 2,
            fabric=(cluster, 32766), fabric_guid="0x%016x" % rng.getrandbits(64), nvlinks=18,
            ecc_counts={}, remap=(0, 0, "No", "No"))
        gs.append(g)
    # GPU 0 busy with two compute processes
    g0 = gs[0]
    g0.update(util_gpu=97, util_mem=41, mem_used=45123, power=611.27, temp=58, sm_clock=1980, video_clock=1755,
              procs=[{"pid": 48211, "type": "C", "name": "/usr/bin/python3", "mem": 38912},
                     {"pid": 48377, "type": "C", "name": "/opt/app/bin/trainer", "mem": 5630}])
    g0["mem_used"] = 38912 + 5630 + 581
    # GPU 5 has old corrected errors and remapped rows, still healthy
    gs[5]["ecc_counts"] = {"aggregate_dram_corr": 12, "aggregate_sram_corr": 3}
    gs[5]["remap"] = (2, 0, "No", "No")
    # GPU 3 in MIG mode: 4g.40gb (GI 1) + 3g.40gb (GI 2)
    g3 = gs[3]
    g3["mig_mode"] = "Enabled"
    g3["mig"] = [mig_dev(rng, H100_PROFILES, 0, "4g.40gb", 1), mig_dev(rng, H100_PROFILES, 1, "3g.40gb", 2)]
    g3.update(util_gpu=None, util_mem=None, mem_used=26)
    host = {"driver": drv, "cuda": cuda, "smi_gpus": gs}

    switches = ["0000:05:00.0", "0000:06:00.0", "0000:07:00.0", "0000:08:00.0"]
    per_switch = [5, 4, 4, 5]

    def remote(g, l):
        s, k = 0, l
        while k >= per_switch[s]:
            k -= per_switch[s]
            s += 1
        return nvml_bus(switches[s]), 2 + g["index"] * 8 + k

    nic_cells = ["PIX", "NODE", "NODE", "NODE", "SYS", "SYS", "SYS", "SYS"]
    answers(d, {
        "q-x.out": qx(host, "r570", "nvsmi_device_v12.dtd", "Tue Sep 16 09:41:07 2025"),
        "L.out": list_L(host),
        "compute-cap.out": "".join("%s, 9.0\n" % g["uuid"] for g in gs),
        "topo-m.out": topo(host, lambda i, j: "NV18", nics=[("mlx5_0", nic_cells)]),
        "nvlink-s.out": nvlink_s(host, 18, "26.562"),
        "nvlink-R.out": nvlink_R(host, remote),
        "mig-lgip.out": lgip(host, lambda g: profile_rows(H100_PROFILES, {})),
        "samples.out": samples(host),
        "compute-apps.out": compute_apps(host),
        "probe.out": "".join(drv + "\n" for _ in gs),
    })
    wrapper(d)
    write(os.path.join(root, "proc/driver/nvidia/version"),
          proc_version(drv, "Fri Mar 14 01:14:06 UTC 2025", "12.3.0 (Ubuntu 12.3.0-1ubuntu1~22.04)"))
    write(os.path.join(root, "sys/module/nvidia/version"), drv + "\n")
    proc_gpus(root, gs, "r570")
    write(os.path.join(root, "proc/modules"), modules(vfio=True))
    boot_id(root, rng)
    pci_drivers(root, ["nvidia", "vfio-pci", "mlx5_core"])
    gpu_sysfs(root, gs)
    for k, a in enumerate(switches):
        pci_function(root, {"addr": a, "root_port": "pci0000:00", "vendor": "0x10de", "device": "0x22a3",
                            "subsys_device": "0x1796", "class": "0x068000", "numa": 0, "cpus": "0-55,112-167",
                            "driver": "nvidia", "group": 10 + k, "gen": 4, "max_width": 2, "cur_width": 2})
    pci_function(root, {"addr": "0000:1a:00.0", "root_port": "pci0000:17", "vendor": "0x15b3",
                        "device": "0x1021", "subsys_device": "0x0023", "class": "0x020000", "numa": 0,
                        "cpus": "0-55,112-167", "driver": "mlx5_core", "group": 21, "gen": 5,
                        "max_width": 16, "cur_width": 16})
    dev_files(root, ["nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset", "kmsg",
                     "nvidia-caps/nvidia-cap1", "nvidia-caps/nvidia-cap2"] + ["nvidia%d" % i for i in range(8)])
    return host


def a100_mig():
    name = "a100-mig"
    d = fresh(name)
    root = os.path.join(d, "root")
    rng = mkrand("bcd-a100-mig")
    drv, cuda = "535.183.01", "12.2"
    gs = []
    for i, b in enumerate(["07", "0f"]):
        addr = "0000:%s:00.0" % b
        g = base_gpu(
            index=i, name="NVIDIA A100-SXM4-80GB", arch_xml="Ampere", uuid=uuid(rng), serial=serial(rng),
            addr=addr, bus_id=nvml_bus(addr), root_port="pci0000:00", minor=i, vbios="92.00.45.00.06",
            board_id="0x%s00" % b, board_part="692-2G506-0212-002", gpu_part="20B2-895-A1", module_id=i + 1,
            inforom="G506.0212.00.02", ecc_object="6.16", gsp=NA, device_id="20B2", subsys="147F10DE",
            gen=4, max_width=16, cur_width=16, mem_total=81920, mem_reserved=869, mem_used=37, bar1=131072,
            util_gpu=None, util_mem=None, temp=29 + i, tmax=85, mem_temp="%d C" % (40 + i), mem_tmax="95 C",
            power=63.41 + i, plimit=400.0, pmin=100.0, sm_clock=1275, mem_clock=1593, video_clock=1275,
            max_sm=1410, max_video=1290, volt="906.250 mV", numa=0, cpus="0-31,64-95", irq=0, group=30 + i,
            ecc_counts={}, remap=None, mig_mode="Enabled", dma=47)
        gs.append(g)
    gs[0]["mig"] = [mig_dev(rng, A100_PROFILES, 0, "3g.40gb", 1), mig_dev(rng, A100_PROFILES, 1, "3g.40gb", 2)]
    gs[1]["mig"] = [mig_dev(rng, A100_PROFILES, 0, "4g.40gb", 1, used=2071),
                    mig_dev(rng, A100_PROFILES, 1, "1g.10gb", 11)]
    gs[1]["mig"][0]["uuid"]  # keep order stable
    gs[1]["procs"] = [{"gi": 1, "ci": 0, "pid": 20417, "type": "C", "name": "python3", "mem": 2048}]
    gs[1]["mem_used"] = 2071 + 13
    host = {"driver": drv, "cuda": cuda, "smi_gpus": gs}
    free = {0: {}, 1: {"1g.10gb": 2, "1g.10gb+me": 1, "1g.20gb": 1}}
    answers(d, {
        "q-x.out": qx(host, "r535", "nvsmi_device_v12.dtd", "Wed Jul 10 14:02:51 2024"),
        "L.out": list_L(host),
        "compute-cap.out": "".join("%s, 8.0\n" % g["uuid"] for g in gs),
        "topo-m.out": topo(host, lambda i, j: "NV12"),
        "nvlink-s.out": nvlink_s(host, 12, "25"),
        "nvlink-R.out": nvlink_R(host, lambda g, l: ("", 0)),
        "mig-lgip.out": lgip(host, lambda g: profile_rows(A100_PROFILES, free[g["index"]])),
        "samples.out": samples(host),
        "compute-apps.out": compute_apps(host),
        "probe.out": "".join(drv + "\n" for _ in gs),
    })
    wrapper(d)
    write(os.path.join(root, "proc/driver/nvidia/version"),
          proc_version(drv, "Wed Jun  5 19:30:12 UTC 2024", "11.4.0 (Ubuntu 11.4.0-1ubuntu1~22.04)"))
    write(os.path.join(root, "sys/module/nvidia/version"), drv + "\n")
    proc_gpus(root, gs, "r535")
    write(os.path.join(root, "proc/modules"), modules())
    boot_id(root, rng)
    pci_drivers(root, ["nvidia", "vfio-pci"])
    gpu_sysfs(root, gs)
    dev_files(root, ["nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia0", "nvidia1", "kmsg"] +
              ["nvidia-caps/nvidia-cap%d" % c for c in (1, 2, 12, 13, 21, 22, 111, 112, 120, 121)])
    return host


def wsl2():
    name = "wsl2"
    d = fresh(name)
    root = os.path.join(d, "root")
    rng = mkrand("bcd-wsl2")
    drv, cuda = "616.56", "13.4"
    g = base_gpu(
        index=0, name="NVIDIA GeForce RTX 5090", brand="GeForce", arch_xml="Blackwell", uuid=uuid(rng),
        serial="0", addr=None, bus_id="00000000:F1:00.0", minor=NA, persistence=NA, dm="WDDM",
        addressing="N/A", virt="Pass-Through", vbios="98.02.2E.00.AB", board_id="0xf100", board_part=NA,
        gpu_part="2B85-300-A1", module_id=1, inforom="G001.0000.94.01", gsp=NA, device_id="2B85",
        subsys="53051462", class3d=False, gen=5, max_width=16, cur_width=16, mem_total=32607,
        mem_reserved=372, mem_used=1843, bar1=32768, util_gpu=4, util_mem=9, temp=38, tmax=90,
        target_temp="83 C", power=21.07, plimit=575.0, pmin=400.0, sm_clock=247, mem_clock=405,
        video_clock=607, max_sm=3090, max_video=3090, ecc="Disabled", ecc_counts=None, mig_mode=NA,
        pstate="P8", fan="0 %", display=True, remap=(0, 0, "No", "No"),
        procs=[{"pid": 412, "type": "G", "name": "/Xwayland", "mem": None}])
    host = {"driver": drv, "cuda": cuda, "smi_gpus": [g]}
    answers(d, {
        "q-x.out": qx(host, "r616", "nvsmi_device_v13.dtd", "Sun Oct  4 16:20:31 2026"),
        "L.out": list_L(host),
        "compute-cap.out": "%s, 12.0\n" % g["uuid"],
        "topo-m.out": "Failed to run topology query: Not Supported\n", "topo-m.exit": 3,
        "nvlink-s.out": "",
        "nvlink-R.out": "",
        "mig-lgip.out": "No MIG-enabled devices found.\n", "mig-lgip.exit": 6,
        "samples.out": samples(host),
        "compute-apps.out": "",
        "probe.out": drv + "\n",
        "privileged.out": "Unable to complete the operation for GPU %s: Not Supported\n" % g["bus_id"],
        "privileged.exit": 3,
    })
    wrapper(d)
    write(os.path.join(root, "proc/modules"),
          MOD % ("kvm_intel", 487424, 0, "-", "") + MOD % ("kvm", 1437696, 1, "kvm_intel,", ""))
    boot_id(root, rng)
    # WSL 2's only "GPU" on its virtual PCI bus is Microsoft's GPU-PV render device (vendor
    # 0x1414, on a random PCI domain), not an NVIDIA function: nothing to bind, nothing to list.
    pci_drivers(root, ["dxgkrnl"])
    pci_function(root, {"addr": "9c1e:00:00.0", "root_port": "pci9c1e:00", "vendor": "0x1414",
                        "device": "0x008e", "subsys_vendor": "0x0000", "class": "0x030200", "numa": -1,
                        "cpus": "0-31", "driver": "dxgkrnl", "group": None})
    dev_files(root, ["dxg", "kmsg"])
    return host


def r470_old():
    name = "r470-old"
    d = fresh(name)
    root = os.path.join(d, "root")
    rng = mkrand("bcd-r470-old")
    drv, cuda = "470.256.02", "11.4"
    gs = []
    for i, b in enumerate(["3b", "d8"]):
        addr = "0000:%s:00.0" % b
        g = base_gpu(
            index=i, name="Tesla V100-PCIE-32GB", brand="Tesla", arch_xml="Volta", uuid=uuid(rng),
            serial=serial(rng), addr=addr, bus_id=nvml_bus(addr), root_port="pci0000:%s" % ("3a" if i == 0 else "d7"),
            minor=i, vbios="88.00.80.00.01", board_id="0x%s00" % b, board_part="900-2G500-0010-000",
            gpu_part="1DB6-897-A1", module_id=0, inforom="G500.0202.00.02", ecc_object="5.0", device_id="1DB6",
            subsys="124A10DE", gen=3, max_width=16, cur_width=16, mem_total=32510, mem_reserved=0, mem_used=0,
            bar1=32768, util_gpu=0, util_mem=0, temp=33 + i, tmax=87, power=36.18 + i, plimit=250.0, pmin=100.0,
            sm_clock=135, mem_clock=877, video_clock=555, max_sm=1380, max_video=1237, numa=i,
            cpus="0-19,40-59" if i == 0 else "20-39,60-79", irq=[94, 132][i], group=[40, 88][i], dma=47,
            ecc_counts={"aggregate_single_bit_dram": 4} if i == 1 else {}, remap=None, mig_mode=NA,
            pstate="P0", retired="0")
        gs.append(g)
    gs[1]["sys_cur_width"] = 8
    gs[1]["cur_width"] = 8
    gs[0].update(procs=[{"pid": 3051, "type": "C", "name": "/usr/local/bin/solver", "mem": 1521}],
                 mem_used=1524, util_gpu=12, util_mem=3)
    host = {"driver": drv, "cuda": cuda, "smi_gpus": gs}
    answers(d, {
        "q-x.out": qx(host, "r470", "nvsmi_device_v11.dtd", "Mon Feb 24 11:07:42 2025"),
        "L.out": list_L(host),
        "compute-cap.out": 'Field "compute_cap" is not a valid field to query.\n\n', "compute-cap.exit": 2,
        "topo-m.out": topo(host, lambda i, j: "SYS", gpu_numa_id=False),
        "nvlink-s.out": "",
        "nvlink-R.out": "",
        "mig-lgip.out": "No MIG-enabled devices found.\n", "mig-lgip.exit": 6,
        "samples.out": 'Field "memory.reserved" is not a valid field to query.\n\n', "samples.exit": 2,
        "compute-apps.out": compute_apps(host),
        "probe.out": "".join(drv + "\n" for _ in gs),
    })
    wrapper(d)
    write(os.path.join(root, "proc/driver/nvidia/version"),
          proc_version(drv, "Thu May  2 14:41:31 UTC 2024", "9.4.0 (Ubuntu 9.4.0-1ubuntu1~20.04.2)"))
    write(os.path.join(root, "sys/module/nvidia/version"), drv + "\n")
    proc_gpus(root, gs, "r470")
    write(os.path.join(root, "proc/modules"), modules())
    boot_id(root, rng)
    pci_drivers(root, ["nvidia", "vfio-pci"])
    gpu_sysfs(root, gs)
    dev_files(root, ["nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia0", "nvidia1", "kmsg"])
    return host


def no_driver():
    name = "no-driver"
    d = fresh(name)
    root = os.path.join(d, "root")
    rng = mkrand("bcd-no-driver")
    for i, b in enumerate(["41", "c1"]):
        pci_function(root, {"addr": "0000:%s:00.0" % b, "root_port": "pci0000:%02x" % (int(b, 16) - 1),
                            "vendor": "0x10de", "device": "0x2331", "subsys_device": "0x1626",
                            "class": "0x030200", "numa": i, "cpus": "0-31" if i == 0 else "32-63",
                            "driver": None, "group": 50 + i, "gen": 5, "max_width": 16, "cur_width": 16})
    write(os.path.join(root, "proc/modules"), modules(nvidia=False, nouveau=True))
    boot_id(root, rng)
    pci_drivers(root, ["nouveau", "vfio-pci"])
    dev_files(root, ["kmsg"])


def passthrough():
    name = "passthrough"
    d = fresh(name)
    root = os.path.join(d, "root")
    rng = mkrand("bcd-passthrough")
    drv, cuda = "570.172.08", "12.8"
    all_gs = []
    for i, b in enumerate(["4a", "61"]):
        addr = "0000:%s:00.0" % b
        g = base_gpu(
            index=i, name="NVIDIA L40S", arch_xml="Ada Lovelace", uuid=uuid(rng), serial=serial(rng), addr=addr,
            bus_id=nvml_bus(addr), root_port="pci0000:%02x" % (int(b, 16) - 1), minor=i, vbios="95.02.66.00.02",
            board_id="0x%s00" % b, board_part="900-2G133-0080-000", gpu_part="26B9-896-A1", module_id=1,
            inforom="G133.0200.00.05", ecc_object="6.16", gsp=drv, device_id="26B9", subsys="185110DE", gen=4,
            max_width=16, cur_width=16, mem_total=46068, mem_reserved=587, mem_used=1, bar1=65536,
            util_gpu=0, util_mem=0, temp=29, tmax=87, power=32.55, plimit=350.0, pmin=100.0, sm_clock=210,
            mem_clock=405, video_clock=795, max_sm=2520, max_video=1965, volt="880.000 mV", numa=0,
            cpus="0-31", irq=0, group=60 + i, ecc_counts={}, remap=(0, 0, "No", "No"), pstate="P8",
            fabric=None, dma=52)
        all_gs.append(g)
    gpu1 = all_gs[1]
    gpu1["driver"] = "vfio-pci"
    gpu1["override"] = "vfio-pci"
    host = {"driver": drv, "cuda": cuda, "smi_gpus": [all_gs[0]]}
    answers(d, {
        "q-x.out": qx(host, "r570", "nvsmi_device_v12.dtd", "Thu Aug 21 10:12:44 2025"),
        "L.out": list_L(host),
        "compute-cap.out": "%s, 8.9\n" % all_gs[0]["uuid"],
        "topo-m.out": topo(host, lambda i, j: ""),
        "nvlink-s.out": "",
        "nvlink-R.out": "",
        "mig-lgip.out": "No MIG-enabled devices found.\n", "mig-lgip.exit": 6,
        "samples.out": samples(host),
        "compute-apps.out": "",
        "probe.out": drv + "\n",
    })
    wrapper(d)
    write(os.path.join(root, "proc/driver/nvidia/version"),
          proc_version(drv, "Wed Jul  9 04:40:38 UTC 2025", "12.3.0 (Ubuntu 12.3.0-1ubuntu1~22.04)"))
    write(os.path.join(root, "sys/module/nvidia/version"), drv + "\n")
    proc_gpus(root, [all_gs[0]], "r570")
    write(os.path.join(root, "proc/modules"), modules(vfio=True))
    boot_id(root, rng)
    pci_drivers(root, ["nvidia", "vfio-pci", "snd_hda_intel"])
    gpu_sysfs(root, [all_gs[0]])
    g = dict(gpu1)
    pci_function(root, {"addr": g["addr"], "root_port": g["root_port"], "vendor": "0x10de", "device": "0x26b9",
                        "subsys_device": "0x1851", "class": "0x030200", "numa": 0, "cpus": "0-31",
                        "driver": "vfio-pci", "override": "vfio-pci", "group": g["group"], "gen": 4,
                        "max_width": 16, "cur_width": 16})
    pci_function(root, {"addr": "0000:61:00.1", "root_port": g["root_port"], "vendor": "0x10de", "device": "0x22ba",
                        "subsys_device": "0x1851", "class": "0x040300", "numa": 0, "cpus": "0-31",
                        "driver": "vfio-pci", "override": "vfio-pci", "group": g["group"]})
    dev_files(root, ["nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia0", "kmsg",
                     "vfio/vfio", "vfio/%d" % g["group"]])
    return all_gs


def wedged():
    name = "wedged"
    d = fresh(name)
    root = os.path.join(d, "root")
    rng = mkrand("bcd-wedged")
    drv, cuda = "550.127.05", "12.4"
    addr = "0000:81:00.0"
    g = base_gpu(index=0, name="NVIDIA A100 80GB PCIe", arch_xml="Ampere", uuid=uuid(rng), serial=serial(rng),
                 addr=addr, bus_id=nvml_bus(addr), root_port="pci0000:80", minor=0, vbios="92.00.90.00.04",
                 device_id="20B5", subsys="153310DE", gen=4, max_width=16, cur_width=16, numa=1,
                 cpus="32-63", irq=0, group=70, gsp="550.127.05", dma=47)
    host = {"driver": drv, "cuda": cuda, "smi_gpus": [g]}
    answers(d, {
        "q-x.hang": "",
        "samples.hang": "",
        "compute-apps.hang": "",
        "L.out": list_L(host),
        "probe.out": drv + "\n",
        "privileged.hang": "",
    })
    wrapper(d)
    write(os.path.join(root, "proc/driver/nvidia/version"),
          proc_version(drv, "Tue Nov 12 23:32:13 UTC 2024", "12.3.0 (Ubuntu 12.3.0-1ubuntu1~22.04)"))
    write(os.path.join(root, "sys/module/nvidia/version"), drv + "\n")
    proc_gpus(root, [g], "r535")
    write(os.path.join(root, "proc/modules"), modules())
    boot_id(root, rng)
    pci_drivers(root, ["nvidia", "vfio-pci"])
    gpu_sysfs(root, [g])
    dev_files(root, ["nvidiactl", "nvidia-uvm", "nvidia0", "kmsg"])


if __name__ == "__main__":
    hgx_h100()
    a100_mig()
    wsl2()
    r470_old()
    no_driver()
    passthrough()
    wedged()
    print("regenerated hosts under", os.path.relpath(HOSTS))
