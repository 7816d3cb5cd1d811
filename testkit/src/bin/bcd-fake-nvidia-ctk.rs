//! `bcd-fake-nvidia-ctk STATE cdi generate --output=FILE --device-name-strategy=uuid
//! [--format=json|yaml] [--mode=wsl]`: a fake `nvidia-ctk` that writes NVIDIA's CDI spec for
//! the GPUs and MIG devices of a `bcd-fake-nvidia-smi` state (format: `bcd_testkit::fake_smi`)
//! to FILE, atomically, in JSON or YAML (`--format`, else FILE's extension). As the real one,
//! it refuses (exit 1, FILE untouched) when a GPU is in MIG mode without MIG devices. Each
//! call appends `nvidia-ctk ARGS` to `calls.log` beside STATE; it writes nothing else.

use std::path::PathBuf;
use std::process::ExitCode;

use bcd_testkit::fake_smi::{self, FakeSmiState};

const USAGE: &str = "usage: bcd-fake-nvidia-ctk STATE cdi generate --output=FILE --device-name-strategy=uuid [--format=json|yaml] [--mode=wsl]";

fn main() -> ExitCode {
    let mut args = std::env::args_os().skip(1);
    let Some(state_path) = args.next().map(PathBuf::from) else {
        eprintln!("{USAGE}");
        return ExitCode::from(2);
    };
    let args: Vec<String> = args.map(|a| a.to_string_lossy().into_owned()).collect();
    let lock = match fake_smi::lock(&state_path) {
        Ok(lock) => lock,
        Err(e) => {
            eprintln!("bcd-fake-nvidia-ctk: {e}");
            return ExitCode::from(2);
        }
    };
    if let Err(e) = fake_smi::log_call(&state_path, &format!("nvidia-ctk {}", args.join(" "))) {
        eprintln!("bcd-fake-nvidia-ctk: {e}");
        return ExitCode::from(2);
    }
    let Some(ctk) = fake_smi::ctk_args(&args) else {
        eprintln!("{USAGE}");
        return ExitCode::from(2);
    };
    let state = match FakeSmiState::read(&state_path) {
        Ok(state) => state,
        Err(e) => {
            eprintln!("bcd-fake-nvidia-ctk: {e}");
            return ExitCode::from(2);
        }
    };
    let devices = match fake_smi::cdi_devices(&state) {
        Ok(devices) => devices,
        Err(e) => {
            eprintln!("time=\"2026-01-01T00:00:00Z\" level=error msg=\"{e}\"");
            return ExitCode::from(1);
        }
    };
    let text = if ctk.json {
        fake_smi::cdi_json(&devices)
    } else {
        fake_smi::cdi_yaml(&devices)
    };
    let name = ctk
        .output
        .file_name()
        .map_or_else(|| "spec".into(), |n| n.to_string_lossy().into_owned());
    let tmp = ctk
        .output
        .with_file_name(format!(".{name}.{}.tmp", std::process::id()));
    let written = std::fs::write(&tmp, text).and_then(|()| std::fs::rename(&tmp, &ctk.output));
    drop(lock);
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        eprintln!(
            "time=\"2026-01-01T00:00:00Z\" level=error msg=\"failed to save CDI spec {}: {e}\"",
            ctk.output.display()
        );
        return ExitCode::from(1);
    }
    eprintln!(
        "time=\"2026-01-01T00:00:00Z\" level=info msg=\"Generated CDI spec with version 0.5.0\""
    );
    ExitCode::SUCCESS
}
