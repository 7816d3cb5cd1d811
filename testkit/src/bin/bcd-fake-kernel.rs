//! `bcd-fake-kernel SYS`: plays the kernel's side of PCI driver binding on the fake sysfs tree
//! `SYS` (a demo host copy's `root/sys`), so that `bcd vfio bind` and `release` complete there
//! as on a host: an address written to a driver's `unbind` loses its `driver` link, one
//! written to `drivers_probe` is linked to its `driver_override`, or back to the driver it had
//! when this started. For `packaging/demo` and tests; it runs until it is killed and writes
//! nothing outside `SYS`.

use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    let mut args = std::env::args_os().skip(1);
    let (Some(sys), None) = (args.next().map(PathBuf::from), args.next()) else {
        eprintln!("usage: bcd-fake-kernel SYS (the sys folder of a fake host's copy)");
        return ExitCode::from(2);
    };
    if !sys.join("bus/pci/devices").is_dir() {
        eprintln!(
            "bcd-fake-kernel: {} has no bus/pci/devices: it is not the sys folder of a fake host",
            sys.display()
        );
        return ExitCode::from(2);
    }
    let mut kernel = bcd_testkit::FakePciKernel::new(&sys);
    // Each function goes back to the driver it has now when a probe names no override.
    if let Ok(devices) = std::fs::read_dir(sys.join("bus/pci/devices")) {
        for dev in devices.flatten() {
            let driver = std::fs::read_link(dev.path().join("driver")).ok();
            let name = driver.as_ref().and_then(|d| d.file_name()?.to_str());
            if let (Some(addr), Some(name)) = (dev.file_name().to_str(), name) {
                kernel.set_default(addr, name);
            }
        }
    }
    kernel.start_kernel();
    loop {
        std::thread::park();
    }
}
