//! `bcd-fake-kernel`, the fake PCI kernel as a program (`packaging/demo` runs it on a demo
//! host's copy): it refuses a folder that is no fake host's `sys`, and on one it plays the
//! kernel's side of an unbind and a probe back to the driver a function had.

use std::process::Command;
use std::time::Duration;

#[test]
fn the_fake_kernel_refuses_a_folder_that_is_no_fake_sys() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_bcd-fake-kernel"))
        .arg(dir.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("has no bus/pci/devices"));
}

#[test]
fn the_fake_kernel_unbinds_and_probes_back_to_the_driver_a_function_had() {
    let dir = tempfile::tempdir().unwrap();
    let sys = dir.path().join("sys");
    let tree = bcd_testkit::FakePciKernel::new(&sys);
    tree.add_function("0000:18:00.0", "0x10de", "0x030200", Some("nvidia"));
    /// The program, killed when the test ends however it ends.
    struct Running(std::process::Child);
    impl Drop for Running {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let _kernel = Running(
        Command::new(env!("CARGO_BIN_EXE_bcd-fake-kernel"))
            .arg(&sys)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    let pci = sys.join("bus/pci");
    // Written again until it takes: the program makes the driver files anew as it starts.
    bcd_testkit::wait_for("the unbind", Duration::from_secs(5), || {
        if tree.driver("0000:18:00.0").is_none() {
            return true;
        }
        std::fs::write(pci.join("drivers/nvidia/unbind"), "0000:18:00.0").unwrap();
        std::thread::sleep(Duration::from_millis(50));
        false
    });
    std::fs::write(pci.join("drivers_probe"), "0000:18:00.0").unwrap();
    bcd_testkit::wait_for("the probe back to nvidia", Duration::from_secs(5), || {
        tree.driver("0000:18:00.0").as_deref() == Some("nvidia")
    });
}
