//! `bcd-fake-nvidia-smi STATE ARGS...`: a stateful fake `nvidia-smi` for MIG layout tests.
//! STATE is a JSON file (format: `bcd_testkit::fake_smi`) holding each GPU's MIG mode,
//! profiles and instances; `-q -x`, `-L`, `mig -lgip`/`-lgipp`/`-lgi`/`-lci`, `-mig`,
//! `mig -cgi`/`-dci`/`-dgi` and `--gpu-reset` answer from it and change it as the driver
//! would, refusing what the driver refuses. Every other query goes to the fake hosts' replay
//! script (`testdata/hosts/README.md`). Each call holds an exclusive lock on `STATE.lock`,
//! appends its argument line to `calls.log` beside STATE, and writes nothing else.

use std::io::Write as _;
use std::os::unix::process::CommandExt as _;
use std::path::PathBuf;
use std::process::{Command, ExitCode, Stdio};

use bcd_testkit::fake_smi::{self, FakeSmiState, Outcome};

fn main() -> ExitCode {
    let mut args = std::env::args_os().skip(1);
    let Some(state_path) = args.next().map(PathBuf::from) else {
        eprintln!("usage: bcd-fake-nvidia-smi STATE [ARGS...] (STATE: the fake's JSON state)");
        return ExitCode::from(2);
    };
    let args: Option<Vec<String>> = args.map(|a| a.into_string().ok()).collect();
    let Some(args) = args else {
        eprintln!("bcd-fake-nvidia-smi: an argument is not UTF-8");
        return ExitCode::from(2);
    };
    match run(&state_path, &args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("bcd-fake-nvidia-smi: {e}");
            ExitCode::from(2)
        }
    }
}

fn run(state_path: &std::path::Path, args: &[String]) -> Result<ExitCode, String> {
    let lock = fake_smi::lock(state_path)?;
    fake_smi::log_call(state_path, &args.join(" "))?;
    let mut state = FakeSmiState::read(state_path)?;
    let answers = fake_smi::resolve(state_path, &state.answers);
    let template = || {
        let path = answers.join("q-x.out");
        std::fs::read_to_string(&path).map_err(|e| format!("cannot read {}: {e}", path.display()))
    };
    let outcome = fake_smi::smi(&mut state, args, &template);
    let replay = || {
        let mut cmd = Command::new("/bin/sh");
        cmd.arg(fake_smi::resolve(state_path, &state.replay))
            .arg(&answers)
            .args(args);
        cmd
    };
    match outcome {
        Outcome::Answer {
            stdout,
            stderr,
            code,
            changed,
        } => {
            if changed {
                state.write(state_path)?;
            }
            drop(lock);
            print!("{stdout}");
            eprint!("{stderr}");
            let _ = std::io::stdout().flush();
            Ok(ExitCode::from(code))
        }
        Outcome::Delegate => {
            drop(lock);
            let err = replay().exec();
            Err(format!("cannot run the replay script: {err}"))
        }
        Outcome::RewriteQuery { uuid, mig } => {
            drop(lock);
            let out = replay()
                .stdin(Stdio::null())
                .stderr(Stdio::inherit())
                .output()
                .map_err(|e| format!("cannot run the replay script: {e}"))?;
            let text = String::from_utf8_lossy(&out.stdout);
            print!("{}", fake_smi::rewrite_query(&state, &text, uuid, mig));
            let _ = std::io::stdout().flush();
            let code = out.status.code().unwrap_or(255);
            Ok(ExitCode::from(u8::try_from(code).unwrap_or(255)))
        }
    }
}
