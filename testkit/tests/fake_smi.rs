//! `bcd-fake-nvidia-smi` and `bcd-fake-nvidia-ctk` on a copy of the `a100-mig` host: the
//! state round trip, GPU instance placement, the driver's refusals, an injected failure,
//! a reset applying a pending mode, `-q -x`/`-L` following the state, and the CDI spec.

use std::path::{Path, PathBuf};
use std::process::Command;

use bcd_testkit::fake_smi::{self, FakeSmiState};

/// Runs `start` again while it fails with ETXTBSY: a wrapper script just written by one test
/// may still be open for writing in a child another test's thread forked (before its exec
/// closes it).
fn retry_busy<T>(mut start: impl FnMut() -> std::io::Result<T>) -> T {
    for _ in 0..50 {
        match start() {
            Err(e) if e.kind() == std::io::ErrorKind::ExecutableFileBusy => {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            other => return other.unwrap(),
        }
    }
    start().unwrap()
}

struct Host {
    _dir: tempfile::TempDir,
    host: PathBuf,
    state: PathBuf,
}

impl Host {
    /// A copy of `a100-mig` with the fakes installed; `edit` changes the initial state.
    fn new(edit: impl FnOnce(&mut FakeSmiState)) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let host = bcd_testkit::copy_host(dir.path(), "a100-mig");
        let mut state = fake_smi::a100_mig_state();
        edit(&mut state);
        let bin = Path::new(env!("CARGO_BIN_EXE_bcd-fake-nvidia-smi"))
            .parent()
            .unwrap()
            .to_path_buf();
        let state = bcd_testkit::install_fake_smi(&host, &state, &bin);
        Self {
            _dir: dir,
            host,
            state,
        }
    }

    /// Runs the host's `bin/nvidia-smi ARGS`: (exit status, stdout, stderr).
    fn smi(&self, args: &str) -> (i32, String, String) {
        self.run("nvidia-smi", &args.split(' ').collect::<Vec<_>>())
    }

    fn run(&self, program: &str, args: &[&str]) -> (i32, String, String) {
        let mut cmd = Command::new(self.host.join("bin").join(program));
        cmd.args(args).env_clear();
        let out = retry_busy(|| cmd.output());
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    fn ok(&self, args: &str) -> String {
        let (code, out, err) = self.smi(args);
        assert_eq!(code, 0, "nvidia-smi {args}: {out}{err}");
        out
    }

    fn load(&self) -> FakeSmiState {
        FakeSmiState::load(&self.state)
    }

    /// Empties GPU 1 of the copy (destroys its CIs and GIs through the fake).
    fn empty_gpu1(&self) {
        self.ok("mig -i 1 -dci");
        self.ok("mig -i 1 -dgi");
    }
}

#[test]
fn the_committed_state_is_the_hosts_layout_and_round_trips() {
    let state = fake_smi::a100_mig_state();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.json");
    state.save(&path);
    assert_eq!(FakeSmiState::load(&path), state);

    let host = Host::new(|_| {});
    let answers = host.host.join("answers");
    let same = |args: &str, file: &str| {
        let want = std::fs::read_to_string(answers.join(file)).unwrap();
        assert_eq!(host.ok(args), want, "{args}");
    };
    same("-L", "L.out");
    same("mig -lgip", "mig-lgip.out");
    same("-q -x", "q-x.out");
    // Not modelled: replayed; the samples' MIG column follows the state.
    same("topo -m", "topo-m.out");
    let samples = "--query-gpu=uuid,memory.total,memory.used,memory.reserved,memory.free,utilization.gpu,utilization.memory,temperature.gpu,power.draw,power.limit,clocks.sm,clocks.mem,pstate,mig.mode.current,clocks_throttle_reasons.hw_slowdown,clocks_throttle_reasons.hw_thermal_slowdown,clocks_throttle_reasons.hw_power_brake_slowdown,clocks_throttle_reasons.sw_thermal_slowdown --format=csv,noheader,nounits";
    same(samples, "samples.out");
    let calls = bcd_testkit::calls(&host.host);
    assert_eq!(calls.first().map(String::as_str), Some("-L"));
    assert_eq!(calls.last().map(String::as_str), Some(samples));
}

#[test]
fn seven_small_instances_leave_no_room_for_a_3g_but_a_3g_first_does() {
    let host = Host::new(|_| {});
    host.empty_gpu1();
    let (code, out, _) = host.smi("mig -i 0000:0f:00.0 -cgi 19,19,19,19,19,19,19 -C");
    assert_eq!(code, 0, "{out}");
    assert_eq!(out.matches("Successfully created GPU instance").count(), 7);
    let (code, out, _) = host.smi("mig -i 1 -cgi 3g.40gb -C");
    assert_eq!(code, 2);
    assert!(out.contains("Insufficient Resources"), "{out}");
    assert!(host
        .ok("mig -lgip -i 1")
        .contains("   1  MIG 3g.40gb        9     0/2"));

    host.empty_gpu1();
    let out = host.ok("mig -i 1 -cgi 9 -C");
    assert!(
        out.contains(
            "Successfully created GPU instance ID  1 on GPU  1 using profile MIG 3g.40gb (ID  9)"
        ),
        "{out}"
    );
    assert!(out.contains(
        "Successfully created compute instance ID  0 on GPU  1 GPU instance ID  1 using profile MIG 3g.40gb (ID  2)"
    ));
    let lgip = host.ok("mig -lgip -i 1");
    assert!(
        lgip.contains("   1  MIG 1g.10gb       19     3/7"),
        "{lgip}"
    );
    assert!(
        lgip.contains("   1  MIG 3g.40gb        9     1/2"),
        "{lgip}"
    );
    let lgi = host.ok("mig -lgi -i 1");
    assert!(
        lgi.contains("|   1  MIG 3g.40gb          9        1          0:4     |"),
        "{lgi}"
    );
    let gpu = host.load().gpus[1].clone();
    assert_eq!(gpu.instances.len(), 1);
    assert!(gpu.instances[0].cis[0].uuid.starts_with("MIG-"));
    assert_eq!(gpu.instances[0].cis[0].uuid.len(), 40);
}

#[test]
fn unknown_profiles_and_gpus_and_mig_off_are_refused() {
    let host = Host::new(|s| s.gpus[1].mig_mode = false);
    let (code, out, _) = host.smi("mig -i 0 -cgi 99 -C");
    assert_eq!(code, 6);
    assert!(out.contains("using profile 99: Not Found"), "{out}");
    let (code, out, _) = host.smi("mig -i 0000:99:00.0 -lgi");
    assert_eq!((code, out.as_str()), (6, "No devices were found\n"));
    let (code, out, _) = host.smi("mig -i 1 -cgi 19 -C");
    assert_eq!(code, 3, "{out}");
    assert_eq!(host.ok("mig -lgip -i 1"), "No MIG-enabled devices found.\n");
}

#[test]
fn a_gpu_instance_with_compute_instances_is_not_destroyed() {
    let host = Host::new(|_| {});
    let (code, out, _) = host.smi("mig -i 00000000:07:00.0 -dgi");
    assert_eq!(code, 19);
    assert!(out.contains("In use by another client"), "{out}");
    assert_eq!(host.load().gpus[0].instances.len(), 2);
    let out = host.ok("mig -i 0 -dci");
    assert_eq!(
        out,
        "Successfully destroyed compute instance ID  0 from GPU  0 GPU instance ID  1\n\
         Successfully destroyed compute instance ID  0 from GPU  0 GPU instance ID  2\n"
    );
    let (code, out, _) = host.smi("mig -i 0 -dci");
    assert_eq!(
        (code, out.as_str()),
        (6, "Failed to destroy compute instances: Not Found\n")
    );
    let out = host.ok("mig -i 0 -dgi");
    assert!(out.contains("Successfully destroyed GPU instance ID  2 from GPU  0"));
    let (code, _, _) = host.smi("mig -i 0 -dgi");
    assert_eq!(code, 6);
    assert!(host.ok("mig -lgi -i 0").contains("No GPU instances found"));
}

#[test]
fn mig_mode_changes_are_refused_while_a_client_holds_the_gpu() {
    let host = Host::new(|_| {});
    host.empty_gpu1();
    let mut state = host.load();
    state.set_clients(1, true);
    state.save(&host.state);
    let (code, out, _) = host.smi("-i 0000:0F:00.0 -mig 0");
    assert_eq!(code, 19);
    assert_eq!(
        out,
        "Unable to disable MIG Mode for GPU 00000000:0F:00.0: In use by another client\n"
    );
    let (code, _, _) = host.smi("--gpu-reset -i 1");
    assert_eq!(code, 255);
    assert!(host.load().gpus[1].mig_mode);

    let mut state = host.load();
    state.set_clients(1, false);
    state.save(&host.state);
    // GPU 0 still has instances: disabling it is refused.
    let (code, _, _) = host.smi("-i 0 -mig 0");
    assert_eq!(code, 19);
    let out = host.ok("-i 1 -mig 0");
    assert_eq!(
        out,
        "Disabled MIG Mode for GPU 00000000:0F:00.0\nAll done.\n"
    );
    let gpu = &host.load().gpus[1];
    assert!(!gpu.mig_mode && !gpu.pending_mig);
}

#[test]
fn an_injected_failure_keeps_the_instances_made_before_it() {
    let host = Host::new(|s| s.set_fail_create_at(1, Some(2)));
    host.empty_gpu1();
    let (code, out, _) = host.smi("mig -i 1 -cgi 14,14,14 -C");
    assert_eq!(code, 255);
    assert_eq!(out.matches("Successfully created GPU instance").count(), 1);
    assert!(out.ends_with("using profile 14: Unknown Error\n"), "{out}");
    let gpu = &host.load().gpus[1];
    assert_eq!(gpu.instances.len(), 1);
    assert_eq!(gpu.created, 2);
    // Only the second creation fails: the next one succeeds, at the next free placement.
    host.ok("mig -i 1 -cgi 14 -C");
    assert!(host
        .ok("mig -lgi -i 1")
        .contains("14        2          2:2"));
}

#[test]
fn a_reset_applies_a_pending_mode_and_clears_the_instances() {
    let host = Host::new(|s| s.gpus[1].mode_change_needs_reset = true);
    host.empty_gpu1();
    let out = host.ok("-i 1 -mig 0");
    assert!(
        out.contains(
            "Warning: MIG mode is in pending disable state for GPU 00000000:0F:00.0:Not Supported"
        ),
        "{out}"
    );
    assert!(out.ends_with("All done.\n"));
    let gpu = &host.load().gpus[1];
    assert!(gpu.mig_mode && !gpu.pending_mig);
    let qx = host.ok("-q -x");
    assert!(qx
        .contains("<current_mig>Enabled</current_mig>\n\t\t\t<pending_mig>Disabled</pending_mig>"));

    let out = host.ok("--gpu-reset -i 00000000:0f:00.0");
    assert_eq!(
        out,
        "GPU 00000000:0F:00.0 was successfully reset.\nAll done.\n"
    );
    assert!(!host.load().gpus[1].mig_mode);
    // A reset also drops every instance of a MIG GPU.
    host.ok("--gpu-reset -i 0");
    assert!(host.load().gpus[0].instances.is_empty());
    assert!(host.load().gpus[0].mig_mode);
}

#[test]
fn query_and_list_follow_the_state() {
    let host = Host::new(|_| {});
    host.empty_gpu1();
    host.ok("-i 1 -mig 0");
    host.ok("mig -i 0 -dci");
    host.ok("mig -i 0 -dgi");
    host.ok("mig -i 0 -cgi 1g.10gb,2g.20gb -C");
    let state = host.load();
    let uuids: Vec<&str> = state.gpus[0]
        .instances
        .iter()
        .map(|i| i.cis[0].uuid.as_str())
        .collect();
    let list = host.ok("-L");
    assert_eq!(
        list,
        format!(
            "GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-5ae30e40-78ba-e5df-4b1a-d79c2d43241b)\n  \
             MIG 1g.10gb     Device  0: (UUID: {})\n  \
             MIG 2g.20gb     Device  1: (UUID: {})\n\
             GPU 1: NVIDIA A100-SXM4-80GB (UUID: GPU-563d1407-3f32-e972-769a-596d3391ac61)\n",
            uuids[0], uuids[1]
        )
    );
    let qx = host.ok("-q -x");
    let gpu1 = &qx[qx.find("<gpu id=\"00000000:0F:00.0\">").unwrap()..];
    assert!(gpu1.contains("<current_mig>Disabled</current_mig>"));
    assert!(gpu1.contains("<mig_devices>\n\t\t\tNone\n\t\t</mig_devices>"));
    let gpu0 = &qx[..qx.find("<gpu id=\"00000000:0F:00.0\">").unwrap()];
    assert_eq!(gpu0.matches("<mig_device>").count(), 2);
    assert!(gpu0.contains("<gpu_instance_id>1</gpu_instance_id>"));
    assert!(gpu0.contains("<total>20096 MiB</total>"));
    assert!(gpu0.contains("<multiprocessor_count>28</multiprocessor_count>"));
    // 1g at 0:1, 2g at its first free placement, 2:2.
    let lgi = host.ok("mig -lgi");
    assert!(
        lgi.contains("|   0  MIG 2g.20gb         14        2          2:2     |"),
        "{lgi}"
    );
    assert!(!lgi.contains("|   1 "));
    let lci = host.ok("mig -lci");
    assert!(
        lci.contains("MIG 2g.20gb          1         0          0:2"),
        "{lci}"
    );
    // Replayed by the generic key: no answer is committed, so the replay refuses; the fake
    // passes its status on.
    let (code, out, err) = host.smi("--query-gpu=uuid,mig.mode.current --format=csv,noheader");
    assert_eq!((code, out.as_str()), (2, ""));
    assert!(err.contains("no answer for"), "{err}");
}

#[test]
fn the_ctk_writes_the_spec_of_the_state_and_refuses_mig_without_devices() {
    let host = Host::new(|_| {});
    let out_dir = host.host.join("cdi");
    std::fs::create_dir_all(&out_dir).unwrap();
    let yaml = out_dir.join("nvidia.yaml");
    let arg = format!("--output={}", yaml.display());
    let (code, _, err) = host.run(
        "nvidia-ctk",
        &["cdi", "generate", &arg, "--device-name-strategy=uuid"],
    );
    assert_eq!(code, 0, "{err}");
    let text = std::fs::read_to_string(&yaml).unwrap();
    assert!(text.starts_with("---\ncdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices:\n"));
    assert!(text.contains("    - name: MIG-0972a19e-db10-b80f-9d0a-f9e7ac76cf65\n"));
    // GPU minor 1, GI 11: 3 + 9 * (15 + 11) = 237, its CI 0: 238.
    assert!(text.contains("/dev/nvidia-caps/nvidia-cap237\n"));
    assert!(text.contains("/dev/nvidia-caps/nvidia-cap238\n"));
    assert!(text.contains("        - NVIDIA_VISIBLE_DEVICES=void\n"));

    let json = out_dir.join("nvidia.json");
    let arg = format!("--output={}", json.display());
    let (code, _, err) = host.run(
        "nvidia-ctk",
        &[
            "cdi",
            "generate",
            &arg,
            "--device-name-strategy=uuid",
            "--format=json",
            "--mode=wsl",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let spec: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let devices = spec["devices"].as_array().unwrap();
    assert_eq!(devices.len(), 6);
    let names: Vec<&str> = devices
        .iter()
        .map(|d| d["name"].as_str().unwrap())
        .collect();
    assert_eq!(names[0], "GPU-5ae30e40-78ba-e5df-4b1a-d79c2d43241b");
    assert_eq!(names[1], "MIG-58866115-6175-6822-e455-1694c2bc414b");
    let nodes = &devices[1]["containerEdits"]["deviceNodes"];
    assert_eq!(nodes[0]["path"], "/dev/nvidia0");
    assert_eq!(nodes[1]["path"], "/dev/nvidia-caps/nvidia-cap12");
    assert_eq!(nodes[1]["major"], 508);
    assert_eq!(nodes[2]["minor"], 13);
    assert_eq!(spec["containerEdits"]["deviceNodes"][0]["minor"], 255);

    // Usage errors: exit 2, recorded, nothing written.
    let (code, _, err) = host.run("nvidia-ctk", &["cdi", "generate", &arg]);
    assert_eq!(code, 2);
    assert!(err.starts_with("usage: "));
    assert!(bcd_testkit::calls(&host.host).contains(&format!("nvidia-ctk cdi generate {arg}")));

    // A MIG GPU without MIG devices: refused, the old spec stays.
    host.empty_gpu1();
    let before = std::fs::read_to_string(&json).unwrap();
    let (code, _, err) = host.run(
        "nvidia-ctk",
        &["cdi", "generate", &arg, "--device-name-strategy=uuid"],
    );
    assert_eq!(code, 1);
    assert!(err.contains("no MIG devices"), "{err}");
    assert_eq!(err.lines().count(), 1);
    assert_eq!(std::fs::read_to_string(&json).unwrap(), before);
}

#[test]
fn bad_state_and_missing_state_are_one_line_errors() {
    let dir = tempfile::tempdir().unwrap();
    let smi = env!("CARGO_BIN_EXE_bcd-fake-nvidia-smi");
    let out = Command::new(smi).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let bad = dir.path().join("s.json");
    std::fs::write(&bad, "{").unwrap();
    let out = Command::new(smi).arg(&bad).arg("-L").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("is not a fake nvidia-smi state"));
}

#[test]
fn the_committed_profile_tables_load_and_offer_every_instance_on_an_empty_gpu() {
    for (file, name, profiles) in [
        ("profiles-a100-sxm4-40gb.json", "NVIDIA A100-SXM4-40GB", 7),
        ("profiles-a30-24gb.json", "NVIDIA A30", 4),
    ] {
        let path = bcd_testkit::repo().join("testdata/smi/mig").join(file);
        let table: Vec<fake_smi::FakeProfile> =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(table.len(), profiles, "{file}");
        let host = Host::new(|s| {
            s.gpus.truncate(1);
            s.gpus[0].name = name.into();
            s.gpus[0].instances.clear();
            s.gpus[0].profiles = table.clone();
        });
        let lgip = host.ok("mig -lgip");
        for p in &table {
            let free = format!("{}/{}", p.total, p.total);
            assert!(
                lgip.lines()
                    .any(|l| l.contains(&format!("MIG {} ", p.name)) && l.contains(&free)),
                "{file}: {}\n{lgip}",
                p.name
            );
            assert!(p.placements.iter().all(|x| x.size == p.placements[0].size));
        }
        // The largest profile fills the GPU.
        let full = table.iter().max_by_key(|p| p.sm).unwrap();
        host.ok(&format!("mig -i 0 -cgi {} -C", full.id));
        assert!(!host.ok("mig -lgip").contains(" 1/"));
    }
}

#[test]
fn concurrent_calls_see_one_state_at_a_time() {
    let host = Host::new(|_| {});
    host.empty_gpu1();
    let children: Vec<_> = (0..10)
        .map(|_| {
            let mut cmd = Command::new(host.host.join("bin/nvidia-smi"));
            cmd.args(["mig", "-i", "1", "-cgi", "19", "-C"])
                .stdout(std::process::Stdio::null());
            retry_busy(|| cmd.spawn())
        })
        .collect();
    let codes: Vec<_> = children
        .into_iter()
        .map(|mut c| c.wait().unwrap().code())
        .collect();
    assert_eq!(
        codes.iter().filter(|c| **c == Some(0)).count(),
        7,
        "{codes:?}"
    );
    assert_eq!(
        codes.iter().filter(|c| **c == Some(2)).count(),
        3,
        "{codes:?}"
    );
    let gpu = &host.load().gpus[1];
    let gis: std::collections::BTreeSet<_> = gpu.instances.iter().map(|i| i.gi).collect();
    let uuids: std::collections::BTreeSet<_> = gpu
        .instances
        .iter()
        .map(|i| i.cis[0].uuid.clone())
        .collect();
    assert_eq!((gis.len(), uuids.len()), (7, 7));
    assert_eq!(bcd_testkit::calls(&host.host).len(), 12);
}
