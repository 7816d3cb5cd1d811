//! The stateful fake `nvidia-smi` and `nvidia-ctk` for MIG layout tests: their state file,
//! what they answer, and how a test installs them on a copy of a fake host.
//!
//! The programs `bcd-fake-nvidia-smi STATE ARGS...` and `bcd-fake-nvidia-ctk STATE ARGS...`
//! are thin: each takes an exclusive lock on `STATE.lock` for the whole call (bcd runs several
//! `nvidia-smi` at once), appends its argument line to `calls.log` beside STATE, loads STATE,
//! calls [`smi`] or [`ctk`] here, rewrites STATE atomically (a temporary file beside it, then
//! a rename) when the call changed it, and prints what came back. Arguments the fake does not
//! model are handed to the replay script of the fake hosts (`sh REPLAY ANSWERS ARGS...`, the
//! protocol of `testdata/hosts/README.md`).
//!
//! # The state file (JSON)
//!
//! ```json
//! { "replay": "../replay-nvidia-smi",   // the replay script; relative to STATE's folder
//!   "answers": "answers",               // the host's answers folder; likewise
//!   "next_uuid": 1,                     // seed of the next MIG UUID made by -cgi ... -C
//!   "gpus": [ {
//!     "index": 0, "bus_id": "00000000:07:00.0", "uuid": "GPU-...",
//!     "name": "NVIDIA A100-SXM4-80GB", "minor": 0,
//!     "mig_mode": true,                 // current MIG mode
//!     "pending_mig": true,              // pending MIG mode
//!     "mode_change_needs_reset": false, // true: -mig sets only pending; --gpu-reset applies it
//!     "clients": false,                 // true: a client holds the GPU: -mig, --gpu-reset refused
//!     "fail_create_at": null,           // n: the n-th GPU instance created on this GPU
//!                                       //    (counted by "created") fails, Unknown Error
//!     "created": 0,                     // GPU instances created so far in this state's life
//!     "profiles": [ { "id": 9, "name": "3g.40gb", "total": 2, "memory_mib": 40320,
//!                     "memory_gib": 39.5, "sm": 42, "dec": 2, "enc": 0, "ce": 3, "jpeg": 0,
//!                     "ofa": 0, "placements": [ { "start": 0, "size": 4 } ] } ],
//!     "instances": [ { "gi": 1, "profile_id": 9, "start": 0, "size": 4,
//!                      "cis": [ { "ci": 0, "uuid": "MIG-..." } ] } ] } ] }
//! ```
//!
//! `mode_change_needs_reset`, `clients`, `fail_create_at`, `created`, `instances` and
//! `next_uuid` may be left out (false, none, 0, empty, 1).
//!
//! # What the fake answers itself
//!
//! `-q -x` (the host's `answers/q-x.out` with each known GPU's MIG mode and `mig_devices`
//! rewritten: the template's own `mig_device` block where one has the same GI, CI and SM
//! count, else a generated one; the rest of the template, its processes included, as is), `-L`, `mig -lgip`, `mig -lgipp`, `mig -lgi`, `mig -lci` (each with an optional
//! `-i GPU`), `-mig 0|1` (with an optional `-i GPU`), `mig -dci`, `mig -dgi` (with optional
//! `-gi ID,...`), `mig -cgi ID|NAME,... [-C]`, `--gpu-reset -i GPU` (or `-r -i GPU`), and any
//! `--query-gpu=` query naming both `uuid` and `mig.mode.current`: the replayed answer with
//! that column rewritten from the state. A GPU is its index or its bus id, in NVML form
//! (`00000000:07:00.0`) or short (`0000:07:00.0`), in any case.
//!
//! Exit statuses: 6 not found and 19 in use (NVML's codes), 3 for `-cgi` without MIG mode, 2
//! for a profile that does not fit (Insufficient Resources) and 255 for the injected Unknown
//! Error and a refused reset: choices of this fake, no capture of the real statuses was at
//! hand. `mig -lgi`/`-lci` with MIG on and no
//! instance print a boxed `No GPU instances found` / `No compute instances found` row, exit
//! 0; with no MIG GPU, `No MIG-enabled devices found.`, exit 0 (as `-lgip` does for real).

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The whole state of the fake.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FakeSmiState {
    /// The replay script (relative paths: to the state file's folder).
    pub replay: PathBuf,
    /// The host's answers folder (likewise).
    pub answers: PathBuf,
    /// The GPUs, in index order.
    pub gpus: Vec<FakeGpu>,
    /// The seed of the next MIG UUID.
    #[serde(default = "one")]
    pub next_uuid: u64,
}

fn one() -> u64 {
    1
}

/// One GPU of the fake.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FakeGpu {
    /// nvidia-smi's index.
    pub index: u32,
    /// NVML bus id, `00000000:07:00.0`.
    pub bus_id: String,
    /// `GPU-...`.
    pub uuid: String,
    /// Product name.
    pub name: String,
    /// `/dev/nvidia<minor>`.
    pub minor: u32,
    /// Current MIG mode.
    pub mig_mode: bool,
    /// Pending MIG mode.
    pub pending_mig: bool,
    /// Whether `-mig` only sets the pending mode (a `--gpu-reset` applies it).
    #[serde(default)]
    pub mode_change_needs_reset: bool,
    /// Whether a client holds the GPU (`-mig` and `--gpu-reset` refused).
    #[serde(default)]
    pub clients: bool,
    /// The n-th GPU instance created on this GPU (1-based, counted by `created`) fails.
    #[serde(default)]
    pub fail_create_at: Option<u32>,
    /// GPU instances created (or tried) so far.
    #[serde(default)]
    pub created: u32,
    /// The GPU instance profiles it offers.
    pub profiles: Vec<FakeProfile>,
    /// Its GPU instances.
    #[serde(default)]
    pub instances: Vec<FakeInstance>,
}

/// One GPU instance profile.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FakeProfile {
    /// Profile id (`9`).
    pub id: u32,
    /// Name without `MIG ` (`3g.40gb`).
    pub name: String,
    /// Instances of it the GPU holds at most.
    pub total: u32,
    /// Memory of one instance, MiB (`-q -x`'s `fb_memory_usage` total).
    pub memory_mib: u64,
    /// Memory of one instance, GiB (`-lgip`'s column).
    pub memory_gib: f64,
    /// Streaming multiprocessors.
    pub sm: u32,
    /// Video decoders.
    pub dec: u32,
    /// Video encoders.
    pub enc: u32,
    /// Copy engines.
    pub ce: u32,
    /// JPEG decoders.
    pub jpeg: u32,
    /// Optical-flow accelerators.
    pub ofa: u32,
    /// Where an instance of it may sit, in the order the driver tries them.
    pub placements: Vec<FakePlacement>,
}

/// A placement: memory slices `[start, start + size)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct FakePlacement {
    /// First slice.
    pub start: u32,
    /// Number of slices.
    pub size: u32,
}

/// One GPU instance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FakeInstance {
    /// GPU instance id.
    pub gi: u32,
    /// Its profile's id.
    pub profile_id: u32,
    /// First slice.
    pub start: u32,
    /// Number of slices.
    pub size: u32,
    /// Its compute instances.
    #[serde(default)]
    pub cis: Vec<FakeComputeInstance>,
}

/// One compute instance (a MIG device).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FakeComputeInstance {
    /// Compute instance id.
    pub ci: u32,
    /// `MIG-...`.
    pub uuid: String,
}

impl FakeSmiState {
    /// Reads a state file.
    ///
    /// # Errors
    ///
    /// A one-line reason when it cannot be read or is not a state.
    pub fn read(path: &Path) -> Result<Self, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read the state {}: {e}", path.display()))?;
        serde_json::from_str(&text)
            .map_err(|e| format!("{} is not a fake nvidia-smi state: {e}", path.display()))
    }

    /// Writes a state file atomically (a temporary file beside it, then a rename).
    ///
    /// # Errors
    ///
    /// A one-line reason when it cannot be written.
    pub fn write(&self, path: &Path) -> Result<(), String> {
        let mut text = serde_json::to_string_pretty(self).map_err(|e| e.to_string())?;
        text.push('\n');
        let name = path
            .file_name()
            .map_or_else(|| "state".into(), |n| n.to_string_lossy().into_owned());
        let tmp = path.with_file_name(format!(".{name}.{}.tmp", std::process::id()));
        std::fs::write(&tmp, text)
            .and_then(|()| std::fs::rename(&tmp, path))
            .map_err(|e| format!("cannot write the state {}: {e}", path.display()))
    }

    /// [`Self::read`] for tests: panics on failure.
    pub fn load(path: &Path) -> Self {
        Self::read(path).unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Self::write`] for tests: panics on failure.
    pub fn save(&self, path: &Path) {
        self.write(path).unwrap_or_else(|e| panic!("{e}"));
    }

    /// The GPU of index `index` (panics when there is none: for tests).
    pub fn gpu_mut(&mut self, index: u32) -> &mut FakeGpu {
        self.gpus
            .iter_mut()
            .find(|g| g.index == index)
            .unwrap_or_else(|| panic!("the fake state has no GPU {index}"))
    }

    /// Sets whether a client holds GPU `index`.
    pub fn set_clients(&mut self, index: u32, clients: bool) {
        self.gpu_mut(index).clients = clients;
    }

    /// Makes the `n`-th GPU instance created on GPU `index` fail (counting from the state's
    /// `created`), or none.
    pub fn set_fail_create_at(&mut self, index: u32, n: Option<u32>) {
        self.gpu_mut(index).fail_create_at = n;
    }

    /// The GPU named `id` (index or bus id in either form, any case).
    pub fn find_gpu(&self, id: &str) -> Option<usize> {
        if let Ok(n) = id.parse::<u32>() {
            return self.gpus.iter().position(|g| g.index == n);
        }
        let want = norm_bus(id)?;
        self.gpus
            .iter()
            .position(|g| norm_bus(&g.bus_id).as_deref() == Some(want.as_str()))
    }
}

/// A bus id as `dddd:bb:dd.f` lowercase (NVML's 8-digit domain cut to 4), or `None`.
fn norm_bus(id: &str) -> Option<String> {
    let id = id.trim().to_ascii_lowercase();
    let (domain, rest) = id.split_once(':')?;
    if !rest.contains(':') {
        return None;
    }
    let domain = u32::from_str_radix(domain, 16).ok()?;
    Some(format!("{domain:04x}:{rest}"))
}

/// The state file's path resolved against its folder: `path` as is when absolute.
pub fn resolve(state_path: &Path, path: &Path) -> PathBuf {
    if path.is_absolute() {
        path.to_path_buf()
    } else {
        state_path
            .parent()
            .unwrap_or_else(|| Path::new("."))
            .join(path)
    }
}

/// The lock file of a state: `STATE.lock`.
pub fn lock_path(state_path: &Path) -> PathBuf {
    let mut name = state_path.as_os_str().to_owned();
    name.push(".lock");
    PathBuf::from(name)
}

/// `calls.log` beside the state.
pub fn calls_path(state_path: &Path) -> PathBuf {
    resolve(state_path, Path::new("calls.log"))
}

/// Takes the exclusive lock of a state, held until the file is dropped.
///
/// # Errors
///
/// A one-line reason when the lock file cannot be opened or locked.
pub fn lock(state_path: &Path) -> Result<std::fs::File, String> {
    let path = lock_path(state_path);
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| format!("cannot open {}: {e}", path.display()))?;
    file.lock()
        .map_err(|e| format!("cannot lock {}: {e}", path.display()))?;
    Ok(file)
}

/// Appends one line to `calls.log` beside the state.
///
/// # Errors
///
/// A one-line reason when it cannot be written.
pub fn log_call(state_path: &Path, line: &str) -> Result<(), String> {
    let path = calls_path(state_path);
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .and_then(|mut f| writeln!(f, "{line}"))
        .map_err(|e| format!("cannot append to {}: {e}", path.display()))
}

/// What one call of the fake does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Print these and exit with this status; `changed`: rewrite the state.
    Answer {
        /// Standard output.
        stdout: String,
        /// Standard error.
        stderr: String,
        /// Exit status.
        code: u8,
        /// Whether the state changed.
        changed: bool,
    },
    /// Hand the arguments to the replay script (exec).
    Delegate,
    /// Run the replay script, rewrite the `mig.mode.current` column (field `mig`) of each
    /// line whose `uuid` field (`uuid`) names a GPU, print, exit with its status.
    RewriteQuery {
        /// Position of the `uuid` field.
        uuid: usize,
        /// Position of the `mig.mode.current` field.
        mig: usize,
    },
}

fn answer(stdout: String, code: u8, changed: bool) -> Outcome {
    Outcome::Answer {
        stdout,
        stderr: String::new(),
        code,
        changed,
    }
}

fn enabled(on: bool) -> &'static str {
    if on {
        "Enabled"
    } else {
        "Disabled"
    }
}

/// Decides what `nvidia-smi ARGS` does on `state`, changing it where the call does.
/// `template` reads the host's `answers/q-x.out` (only `-q -x` asks for it).
pub fn smi(
    state: &mut FakeSmiState,
    args: &[String],
    template: &dyn Fn() -> Result<String, String>,
) -> Outcome {
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    match a.as_slice() {
        ["-q", "-x"] => match template() {
            Ok(t) => answer(query_xml(state, &t), 0, false),
            Err(e) => Outcome::Answer {
                stdout: String::new(),
                stderr: format!("bcd-fake-nvidia-smi: {e}\n"),
                code: 2,
                changed: false,
            },
        },
        ["-L"] => answer(list_gpus(state), 0, false),
        ["--gpu-reset", "-i", id] | ["-r", "-i", id] | ["-i", id, "--gpu-reset"] => {
            gpu_reset(state, id)
        }
        ["-i", id, "-mig", mode] | ["-mig", mode, "-i", id] => set_mig(state, Some(id), mode),
        ["-mig", mode] => set_mig(state, None, mode),
        ["mig", rest @ ..] => mig(state, rest),
        [query, ..] if query.starts_with("--query-gpu=") => {
            let fields: Vec<&str> = query["--query-gpu=".len()..].split(',').collect();
            let uuid = fields.iter().position(|f| *f == "uuid" || *f == "gpu_uuid");
            let mig = fields.iter().position(|f| *f == "mig.mode.current");
            match (uuid, mig) {
                (Some(uuid), Some(mig)) => Outcome::RewriteQuery { uuid, mig },
                _ => Outcome::Delegate,
            }
        }
        _ => Outcome::Delegate,
    }
}

/// Rewrites the `mig.mode.current` column of a replayed CSV answer from the state.
pub fn rewrite_query(state: &FakeSmiState, text: &str, uuid: usize, mig: usize) -> String {
    let mut out = String::new();
    for line in text.lines() {
        let mut cells: Vec<String> = line.split(", ").map(str::to_owned).collect();
        let gpu = cells
            .get(uuid)
            .and_then(|u| state.gpus.iter().find(|g| g.uuid == u.trim()));
        if let (Some(gpu), Some(cell)) = (gpu, cells.get_mut(mig)) {
            *cell = enabled(gpu.mig_mode).to_owned();
        }
        out.push_str(&cells.join(", "));
        out.push('\n');
    }
    out
}

fn no_gpu() -> Outcome {
    answer("No devices were found\n".into(), 6, false)
}

fn gpu_reset(state: &mut FakeSmiState, id: &str) -> Outcome {
    let Some(i) = state.find_gpu(id) else {
        return no_gpu();
    };
    let gpu = &mut state.gpus[i];
    if gpu.clients {
        return answer(
            format!(
                "Unable to reset GPU {}: In use by another client\n",
                gpu.bus_id
            ),
            255,
            false,
        );
    }
    gpu.mig_mode = gpu.pending_mig;
    gpu.instances.clear();
    answer(
        format!("GPU {} was successfully reset.\nAll done.\n", gpu.bus_id),
        0,
        true,
    )
}

fn set_mig(state: &mut FakeSmiState, id: Option<&str>, mode: &str) -> Outcome {
    let on = match mode {
        "1" => true,
        "0" => false,
        _ => {
            return Outcome::Answer {
                stdout: String::new(),
                stderr: format!("Invalid value for -mig: {mode:?} (0 or 1)\n"),
                code: 2,
                changed: false,
            }
        }
    };
    let which: Vec<usize> = match id {
        Some(id) => match state.find_gpu(id) {
            Some(i) => vec![i],
            None => return no_gpu(),
        },
        None => (0..state.gpus.len()).collect(),
    };
    let verb = if on { "enable" } else { "disable" };
    let mut out = String::new();
    let mut code = 0;
    let mut changed = false;
    for i in which {
        let gpu = &mut state.gpus[i];
        if gpu.clients {
            let _ = writeln!(
                out,
                "Unable to {verb} MIG Mode for GPU {}: In use by another client",
                gpu.bus_id
            );
            code = 19;
            continue;
        }
        if !on && !gpu.instances.is_empty() {
            let _ = writeln!(
                out,
                "Unable to disable MIG Mode for GPU {}: In use by another client (GPU instances exist)",
                gpu.bus_id
            );
            code = 19;
            continue;
        }
        gpu.pending_mig = on;
        changed = true;
        if gpu.mode_change_needs_reset {
            let _ = writeln!(
                out,
                "Warning: MIG mode is in pending {verb} state for GPU {}:Not Supported\n\
                 Reboot the system or try nvidia-smi --gpu-reset to make MIG mode effective on GPU {}",
                gpu.bus_id, gpu.bus_id
            );
        } else {
            gpu.mig_mode = on;
            let _ = writeln!(
                out,
                "{} MIG Mode for GPU {}",
                if on { "Enabled" } else { "Disabled" },
                gpu.bus_id
            );
        }
    }
    if code == 0 {
        out.push_str("All done.\n");
    }
    answer(out, code, changed)
}

/// The `mig` subcommand's options.
#[derive(Default)]
struct MigArgs<'a> {
    gpu: Option<&'a str>,
    list: Option<&'a str>,
    cgi: Option<&'a str>,
    create_ci: bool,
    dci: bool,
    dgi: bool,
    gi: Option<&'a str>,
}

fn mig_args<'a>(rest: &[&'a str]) -> Option<MigArgs<'a>> {
    let mut m = MigArgs::default();
    let mut it = rest.iter();
    while let Some(arg) = it.next() {
        match *arg {
            "-i" | "--id" => m.gpu = Some(it.next()?),
            "-lgip" | "-lgipp" | "-lgi" | "-lci" if m.list.is_none() => m.list = Some(arg),
            "-cgi" | "--create-gpu-instance" => m.cgi = Some(it.next()?),
            "-C" | "--default-compute-instance" => m.create_ci = true,
            "-dci" | "--destroy-compute-instance" => m.dci = true,
            "-dgi" | "--destroy-gpu-instance" => m.dgi = true,
            "-gi" | "--gpu-instance-id" => m.gi = Some(it.next()?),
            _ => return None,
        }
    }
    let actions = usize::from(m.list.is_some())
        + usize::from(m.cgi.is_some())
        + usize::from(m.dci)
        + usize::from(m.dgi);
    (actions == 1 && (!m.create_ci || m.cgi.is_some())).then_some(m)
}

fn mig(state: &mut FakeSmiState, rest: &[&str]) -> Outcome {
    let Some(m) = mig_args(rest) else {
        return Outcome::Delegate;
    };
    let which: Vec<usize> = match m.gpu {
        Some(id) => match state.find_gpu(id) {
            Some(i) => vec![i],
            None => return no_gpu(),
        },
        None => (0..state.gpus.len()).collect(),
    };
    let gis: Option<BTreeSet<u32>> = match m.gi {
        None => None,
        Some(list) => {
            let ids: Option<BTreeSet<u32>> =
                list.split(',').map(|s| s.trim().parse().ok()).collect();
            match ids {
                Some(ids) => Some(ids),
                None => return answer(format!("Invalid GPU instance id list: {list}\n"), 2, false),
            }
        }
    };
    if let Some(list) = m.list {
        let mig_on: Vec<&FakeGpu> = which
            .iter()
            .map(|&i| &state.gpus[i])
            .filter(|g| g.mig_mode)
            .collect();
        if mig_on.is_empty() {
            return answer("No MIG-enabled devices found.\n".into(), 0, false);
        }
        let text = match list {
            "-lgip" => table_lgip(&mig_on),
            "-lgipp" => table_lgipp(&mig_on),
            "-lgi" => table_lgi(&mig_on),
            _ => table_lci(&mig_on),
        };
        return answer(text, 0, false);
    }
    if m.dci {
        return destroy_cis(state, &which, gis.as_ref());
    }
    if m.dgi {
        return destroy_gis(state, &which, gis.as_ref());
    }
    let list = m.cgi.unwrap_or_default();
    create(state, &which, list, m.create_ci)
}

fn destroy_cis(state: &mut FakeSmiState, which: &[usize], gis: Option<&BTreeSet<u32>>) -> Outcome {
    let mut out = String::new();
    for &i in which {
        let gpu = &mut state.gpus[i];
        for inst in &mut gpu.instances {
            if gis.is_some_and(|g| !g.contains(&inst.gi)) {
                continue;
            }
            for ci in inst.cis.drain(..) {
                let _ = writeln!(
                    out,
                    "Successfully destroyed compute instance ID {:>2} from GPU {:>2} GPU instance ID {:>2}",
                    ci.ci, gpu.index, inst.gi
                );
            }
        }
    }
    if out.is_empty() {
        return answer(
            "Failed to destroy compute instances: Not Found\n".into(),
            6,
            false,
        );
    }
    answer(out, 0, true)
}

fn destroy_gis(state: &mut FakeSmiState, which: &[usize], gis: Option<&BTreeSet<u32>>) -> Outcome {
    let chosen = |inst: &FakeInstance| gis.is_none_or(|g| g.contains(&inst.gi));
    for &i in which {
        let gpu = &state.gpus[i];
        if let Some(busy) = gpu
            .instances
            .iter()
            .find(|x| chosen(x) && !x.cis.is_empty())
        {
            return answer(
                format!(
                    "Unable to destroy GPU instance ID {:>2} from GPU {:>2}: In use by another client\n",
                    busy.gi, gpu.index
                ),
                19,
                false,
            );
        }
    }
    let mut out = String::new();
    for &i in which {
        let gpu = &mut state.gpus[i];
        let index = gpu.index;
        gpu.instances.retain(|inst| {
            if chosen(inst) {
                let _ = writeln!(
                    out,
                    "Successfully destroyed GPU instance ID {:>2} from GPU {:>2}",
                    inst.gi, index
                );
                false
            } else {
                true
            }
        });
    }
    if out.is_empty() {
        return answer(
            "Failed to destroy GPU instances: Not Found\n".into(),
            6,
            false,
        );
    }
    answer(out, 0, true)
}

/// Whether `[start, start+size)` overlaps an existing instance.
fn overlaps(instances: &[FakeInstance], p: FakePlacement) -> bool {
    instances
        .iter()
        .any(|x| p.start < x.start + x.size && x.start < p.start + p.size)
}

/// The first placement of `profile` (in its listed order) free on `gpu`, unless its total is
/// reached.
fn free_placement(gpu: &FakeGpu, profile: &FakeProfile) -> Option<FakePlacement> {
    let used = gpu
        .instances
        .iter()
        .filter(|x| x.profile_id == profile.id)
        .count();
    if used >= profile.total as usize {
        return None;
    }
    profile
        .placements
        .iter()
        .copied()
        .find(|p| !overlaps(&gpu.instances, *p))
}

/// How many more instances of `profile` fit now (greedy, in placement order).
pub fn free_count(gpu: &FakeGpu, profile: &FakeProfile) -> u32 {
    let mut sim = gpu.clone();
    let mut n = 0;
    while let Some(p) = free_placement(&sim, profile) {
        sim.instances.push(FakeInstance {
            gi: u32::MAX,
            profile_id: profile.id,
            start: p.start,
            size: p.size,
            cis: Vec::new(),
        });
        n += 1;
    }
    n
}

/// A MIG UUID made from a counter: deterministic, canonical lowercase 8-4-4-4-12.
pub fn mig_uuid(n: u64) -> String {
    fn mix(mut z: u64) -> u64 {
        z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    let (a, b) = (mix(n), mix(n ^ 0x5555_5555_5555_5555));
    format!(
        "MIG-{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
        a >> 32,
        (a >> 16) & 0xffff,
        a & 0xffff,
        b >> 48,
        b & 0xffff_ffff_ffff
    )
}

/// The compute instance profile id of a full-size compute instance of `name` (`3g.40gb` →
/// 2), as NVML numbers them by slice count.
fn ci_profile_id(name: &str) -> u32 {
    match slices(name) {
        1 => 0,
        2 => 1,
        3 => 2,
        4 => 3,
        7 => 4,
        6 => 5,
        8 => 7,
        n => n.saturating_sub(1),
    }
}

/// The compute slices of a profile name: the number before `g.`.
fn slices(name: &str) -> u32 {
    name.split_once('g')
        .and_then(|(n, _)| n.parse().ok())
        .unwrap_or(1)
}

fn create(state: &mut FakeSmiState, which: &[usize], list: &str, with_ci: bool) -> Outcome {
    let mut out = String::new();
    let mut changed = false;
    for &i in which {
        let index = state.gpus[i].index;
        if !state.gpus[i].mig_mode {
            let _ = writeln!(
                out,
                "Unable to create a GPU instance on GPU {index:>2}: MIG mode is not enabled: Not Supported"
            );
            return answer(out, 3, changed);
        }
        for want in list.split(',').map(str::trim) {
            let gpu = &state.gpus[i];
            let profile = gpu
                .profiles
                .iter()
                .find(|p| {
                    want.parse::<u32>().ok() == Some(p.id)
                        || p.name == want
                        || format!("MIG {}", p.name) == want
                })
                .cloned();
            let Some(profile) = profile else {
                let _ = writeln!(
                    out,
                    "Unable to create a GPU instance on GPU {index:>2} using profile {want}: Not Found"
                );
                return answer(out, 6, changed);
            };
            let Some(place) = free_placement(gpu, &profile) else {
                let _ = writeln!(
                    out,
                    "Unable to create a GPU instance on GPU {index:>2} using profile {}: Insufficient Resources",
                    profile.id
                );
                return answer(out, 2, changed);
            };
            let gpu = &mut state.gpus[i];
            gpu.created += 1;
            changed = true;
            if gpu.fail_create_at == Some(gpu.created) {
                let _ = writeln!(
                    out,
                    "Unable to create a GPU instance on GPU {index:>2} using profile {}: Unknown Error",
                    profile.id
                );
                return answer(out, 255, changed);
            }
            let gi = (1..)
                .find(|id| gpu.instances.iter().all(|x| x.gi != *id))
                .unwrap_or(1);
            let mut inst = FakeInstance {
                gi,
                profile_id: profile.id,
                start: place.start,
                size: place.size,
                cis: Vec::new(),
            };
            let _ = writeln!(
                out,
                "Successfully created GPU instance ID {gi:>2} on GPU {index:>2} using profile MIG {} (ID {:>2})",
                profile.name, profile.id
            );
            if with_ci {
                let n = state.next_uuid;
                state.next_uuid += 1;
                inst.cis.push(FakeComputeInstance {
                    ci: 0,
                    uuid: mig_uuid(n),
                });
                let _ = writeln!(
                    out,
                    "Successfully created compute instance ID  0 on GPU {index:>2} GPU instance ID {gi:>2} using profile MIG {} (ID {:>2})",
                    profile.name,
                    ci_profile_id(&profile.name)
                );
            }
            state.gpus[i].instances.push(inst);
        }
    }
    answer(out, 0, changed)
}

/// The MIG devices (compute instances) of a GPU in nvidia-smi's order: by GI id, then CI id.
fn mig_devices(gpu: &FakeGpu) -> Vec<(&FakeInstance, &FakeComputeInstance, Option<&FakeProfile>)> {
    let mut insts: Vec<&FakeInstance> = gpu.instances.iter().collect();
    insts.sort_by_key(|x| x.gi);
    let mut out = Vec::new();
    for inst in insts {
        let profile = gpu.profiles.iter().find(|p| p.id == inst.profile_id);
        let mut cis: Vec<&FakeComputeInstance> = inst.cis.iter().collect();
        cis.sort_by_key(|c| c.ci);
        for ci in cis {
            out.push((inst, ci, profile));
        }
    }
    out
}

fn profile_name(gpu: &FakeGpu, id: u32) -> String {
    gpu.profiles
        .iter()
        .find(|p| p.id == id)
        .map_or_else(|| format!("{id}"), |p| p.name.clone())
}

fn list_gpus(state: &FakeSmiState) -> String {
    let mut out = String::new();
    for gpu in &state.gpus {
        let _ = writeln!(out, "GPU {}: {} (UUID: {})", gpu.index, gpu.name, gpu.uuid);
        if !gpu.mig_mode {
            continue;
        }
        for (n, (inst, ci, _)) in mig_devices(gpu).into_iter().enumerate() {
            let _ = writeln!(
                out,
                "  MIG {:<11} Device {n:>2}: (UUID: {})",
                profile_name(gpu, inst.profile_id),
                ci.uuid
            );
        }
    }
    out
}

fn table_lgip(gpus: &[&FakeGpu]) -> String {
    let border = format!("+{}+\n", "-".repeat(77));
    let mut out = border.clone();
    out.push_str(
        "| GPU instance profiles:                                                      |\n",
    );
    out.push_str(
        "| GPU   Name             ID    Instances   Memory     P2P    SM    DEC   ENC  |\n",
    );
    out.push_str(
        "|                              Free/Total   GiB              CE    JPEG  OFA  |\n",
    );
    out.push_str(&format!("|{}|\n", "=".repeat(77)));
    for gpu in gpus {
        for p in &gpu.profiles {
            let ft = format!("{:>6}/{}", free_count(gpu, p), p.total);
            let _ = writeln!(
                out,
                "|{:>4}  MIG {:<13}{:>3}{ft:<8}        {:<11}No{:>7}{:>6}{:>6}   |",
                gpu.index,
                p.name,
                p.id,
                format!("{:.2}", p.memory_gib),
                p.sm,
                p.dec,
                p.enc
            );
            let _ = writeln!(out, "|{:>62}{:>6}{:>6}   |", p.ce, p.jpeg, p.ofa);
            out.push_str(&border);
        }
    }
    out
}

fn table_lgipp(gpus: &[&FakeGpu]) -> String {
    let mut out = String::new();
    for gpu in gpus {
        for p in &gpu.profiles {
            let starts: Vec<String> = p.placements.iter().map(|x| x.start.to_string()).collect();
            let size = p.placements.first().map_or(0, |x| x.size);
            let word = if p.placements.len() == 1 {
                "Placement :"
            } else {
                "Placements:"
            };
            let _ = writeln!(
                out,
                "GPU {:>2} Profile ID {:>2} {word} {{{}}}:{size}",
                gpu.index,
                p.id,
                starts.join(",")
            );
        }
    }
    out
}

fn table_lgi(gpus: &[&FakeGpu]) -> String {
    let border = format!("+{}+\n", "-".repeat(55));
    let mut out = border.clone();
    out.push_str("| GPU instances:                                        |\n");
    out.push_str("| GPU   Name             Profile  Instance   Placement  |\n");
    out.push_str("|                          ID       ID       Start:Size |\n");
    out.push_str(&format!("|{}|\n", "=".repeat(55)));
    let mut any = false;
    for gpu in gpus {
        let mut insts: Vec<&FakeInstance> = gpu.instances.iter().collect();
        insts.sort_by_key(|x| x.gi);
        for inst in insts {
            any = true;
            let _ = writeln!(
                out,
                "|{:>4}  MIG {:<14}{:>4}{:>9}{:>13}     |",
                gpu.index,
                profile_name(gpu, inst.profile_id),
                inst.profile_id,
                inst.gi,
                format!("{}:{}", inst.start, inst.size)
            );
            out.push_str(&border);
        }
    }
    if !any {
        let _ = writeln!(out, "| {:<54}|", "No GPU instances found");
        out.push_str(&border);
    }
    out
}

fn table_lci(gpus: &[&FakeGpu]) -> String {
    let border = format!("+{}+\n", "-".repeat(68));
    let mut out = border.clone();
    out.push_str("| Compute instances:                                                 |\n");
    out.push_str("| GPU     GPU       Name             Profile   Instance   Placement  |\n");
    out.push_str("|       Instance                       ID        ID       Start:Size |\n");
    out.push_str("|         ID                                                         |\n");
    out.push_str(&format!("|{}|\n", "=".repeat(68)));
    let mut any = false;
    for gpu in gpus {
        for (inst, ci, _) in mig_devices(gpu) {
            any = true;
            let name = profile_name(gpu, inst.profile_id);
            let _ = writeln!(
                out,
                "|{:>4}{:>7}       MIG {:<15}{:>3}{:>10}{:>13}     |",
                gpu.index,
                inst.gi,
                name,
                ci_profile_id(&name),
                ci.ci,
                format!("0:{}", slices(&name))
            );
            out.push_str(&border);
        }
    }
    if !any {
        let _ = writeln!(out, "| {:<67}|", "No compute instances found");
        out.push_str(&border);
    }
    out
}

/// `-q -x`: the template with each known GPU's MIG mode and MIG devices from the state.
pub fn query_xml(state: &FakeSmiState, template: &str) -> String {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(at) = rest.find("<gpu id=\"") {
        out.push_str(&rest[..at]);
        let block = &rest[at..];
        let end = block
            .find("</gpu>")
            .map_or(block.len(), |e| e + "</gpu>".len());
        let (block, after) = block.split_at(end);
        let id = block["<gpu id=\"".len()..]
            .split('"')
            .next()
            .unwrap_or_default();
        match state.find_gpu(id).filter(|_| id.contains(':')) {
            Some(i) => out.push_str(&rewrite_gpu(&state.gpus[i], block)),
            None => out.push_str(block),
        }
        rest = after;
    }
    out.push_str(rest);
    out
}

/// Replaces the text between `open` and the next `close` (both kept) in `text`.
fn replace_between(text: &str, open: &str, close: &str, with: &str) -> String {
    let Some(a) = text.find(open) else {
        return text.to_owned();
    };
    let from = a + open.len();
    let Some(len) = text[from..].find(close) else {
        return text.to_owned();
    };
    format!("{}{with}{}", &text[..from], &text[from + len..])
}

/// A `<mig_device>` block of the template (with its leading tabs and trailing newline).
struct TemplateDevice<'a> {
    gi: u32,
    ci: u32,
    sm: u32,
    text: &'a str,
}

fn element<'a>(text: &'a str, name: &str) -> Option<&'a str> {
    let open = format!("<{name}>");
    let from = text.find(&open)? + open.len();
    let len = text[from..].find(&format!("</{name}>"))?;
    Some(text[from..from + len].trim())
}

fn template_devices(block: &str) -> Vec<TemplateDevice<'_>> {
    let mut out = Vec::new();
    let mut at = 0;
    while let Some(start) = block[at..].find("<mig_device>") {
        let start = at + start;
        let line_start = block[..start].rfind('\n').map_or(0, |i| i + 1);
        let Some(len) = block[start..].find("</mig_device>") else {
            break;
        };
        let mut end = start + len + "</mig_device>".len();
        if block[end..].starts_with('\n') {
            end += 1;
        }
        let text = &block[line_start..end];
        let num = |name| element(text, name).and_then(|v| v.parse().ok());
        if let (Some(gi), Some(ci), Some(sm)) = (
            num("gpu_instance_id"),
            num("compute_instance_id"),
            num("multiprocessor_count"),
        ) {
            out.push(TemplateDevice { gi, ci, sm, text });
        }
        at = end;
    }
    out
}

fn rewrite_gpu(gpu: &FakeGpu, block: &str) -> String {
    let block = replace_between(
        block,
        "<current_mig>",
        "</current_mig>",
        enabled(gpu.mig_mode),
    );
    let block = replace_between(
        &block,
        "<pending_mig>",
        "</pending_mig>",
        enabled(gpu.pending_mig),
    );
    let devices = mig_devices(gpu);
    let body = if !gpu.mig_mode || devices.is_empty() {
        "\n\t\t\tNone\n\t\t".to_owned()
    } else {
        let kept = template_devices(&block);
        let mut s = String::from("\n");
        for (n, (inst, ci, p)) in devices.into_iter().enumerate() {
            // The template's own block for this instance, when it is the same profile's: it
            // keeps what the state does not hold (the memory in use).
            let sm = p.map(|p| p.sm);
            if let Some(text) = kept
                .iter()
                .find(|k| k.gi == inst.gi && k.ci == ci.ci && Some(k.sm) == sm)
                .map(|k| k.text)
            {
                s.push_str(&replace_between(
                    text,
                    "<index>",
                    "</index>",
                    &n.to_string(),
                ));
                continue;
            }
            let (sm, ce, enc, dec, ofa, jpg, mib) = p.map_or((0, 0, 0, 0, 0, 0, 0), |p| {
                (p.sm, p.ce, p.enc, p.dec, p.ofa, p.jpeg, p.memory_mib)
            });
            let used = mib.min(13);
            let _ = write!(
                s,
                "\t\t\t<mig_device>\n\
                 \t\t\t\t<index>{n}</index>\n\
                 \t\t\t\t<gpu_instance_id>{}</gpu_instance_id>\n\
                 \t\t\t\t<compute_instance_id>{}</compute_instance_id>\n\
                 \t\t\t\t<device_attributes>\n\
                 \t\t\t\t\t<shared>\n\
                 \t\t\t\t\t\t<multiprocessor_count>{sm}</multiprocessor_count>\n\
                 \t\t\t\t\t\t<copy_engine_count>{ce}</copy_engine_count>\n\
                 \t\t\t\t\t\t<encoder_count>{enc}</encoder_count>\n\
                 \t\t\t\t\t\t<decoder_count>{dec}</decoder_count>\n\
                 \t\t\t\t\t\t<ofa_count>{ofa}</ofa_count>\n\
                 \t\t\t\t\t\t<jpg_count>{jpg}</jpg_count>\n\
                 \t\t\t\t\t</shared>\n\
                 \t\t\t\t</device_attributes>\n\
                 \t\t\t\t<ecc_error_count>\n\
                 \t\t\t\t\t<volatile_count>\n\
                 \t\t\t\t\t\t<sram_uncorrectable>0</sram_uncorrectable>\n\
                 \t\t\t\t\t</volatile_count>\n\
                 \t\t\t\t</ecc_error_count>\n\
                 \t\t\t\t<fb_memory_usage>\n\
                 \t\t\t\t\t<total>{mib} MiB</total>\n\
                 \t\t\t\t\t<reserved>0 MiB</reserved>\n\
                 \t\t\t\t\t<used>{used} MiB</used>\n\
                 \t\t\t\t\t<free>{} MiB</free>\n\
                 \t\t\t\t</fb_memory_usage>\n\
                 \t\t\t\t<bar1_memory_usage>\n\
                 \t\t\t\t\t<total>32767 MiB</total>\n\
                 \t\t\t\t\t<used>0 MiB</used>\n\
                 \t\t\t\t\t<free>32767 MiB</free>\n\
                 \t\t\t\t</bar1_memory_usage>\n\
                 \t\t\t</mig_device>\n",
                inst.gi,
                ci.ci,
                mib - used
            );
        }
        s.push_str("\t\t");
        s
    };
    replace_between(&block, "<mig_devices>", "</mig_devices>", &body)
}

/// The `nvidia-ctk cdi generate` options the fake accepts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CtkArgs {
    /// `--output=FILE`.
    pub output: PathBuf,
    /// JSON (else YAML): `--format`, else FILE's extension.
    pub json: bool,
}

/// Reads `cdi generate --output=FILE --device-name-strategy=uuid [--format=json|yaml]
/// [--mode=wsl]`; `None` for anything else.
pub fn ctk_args(args: &[String]) -> Option<CtkArgs> {
    let (first, rest) = args.split_first()?;
    let (second, rest) = rest.split_first()?;
    if first != "cdi" || second != "generate" {
        return None;
    }
    let (mut output, mut strategy, mut format, mut mode) = (None, None, None, None);
    for arg in rest {
        let (key, value) = arg.split_once('=')?;
        let slot = match key {
            "--output" => &mut output,
            "--device-name-strategy" => &mut strategy,
            "--format" => &mut format,
            "--mode" => &mut mode,
            _ => return None,
        };
        if slot.replace(value).is_some() {
            return None;
        }
    }
    let output = PathBuf::from(output.filter(|o| !o.is_empty())?);
    if strategy != Some("uuid") || mode.is_some_and(|m| m != "wsl") {
        return None;
    }
    let json = match format {
        Some("json") => true,
        Some("yaml") => false,
        Some(_) => return None,
        None => output.extension().is_some_and(|e| e == "json"),
    };
    Some(CtkArgs { output, json })
}

/// A device node of a CDI spec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CdiNode {
    /// Its path (also the host path).
    pub path: String,
    /// Major number.
    pub major: u32,
    /// Minor number.
    pub minor: u32,
}

fn node(path: String, major: u32, minor: u32) -> CdiNode {
    CdiNode { path, major, minor }
}

/// The `/dev/nvidia-caps` minor of a GPU instance's access file: for GPU minor g, GI i,
/// `3 + 9 * (15 * g + i)`; its compute instance c's is that `+ 1 + c`.
pub fn gi_cap_minor(gpu_minor: u32, gi: u32) -> u32 {
    3 + 9 * (15 * gpu_minor + gi)
}

/// The devices of NVIDIA's CDI spec for the state: one per GPU (by UUID), one per MIG device
/// (by MIG UUID). Errors as nvidia-ctk refuses: a MIG GPU without MIG devices.
///
/// # Errors
///
/// A one-line reason.
pub fn cdi_devices(state: &FakeSmiState) -> Result<Vec<(String, Vec<CdiNode>)>, String> {
    let mut out = Vec::new();
    for gpu in &state.gpus {
        let dev = format!("/dev/nvidia{}", gpu.minor);
        out.push((gpu.uuid.clone(), vec![node(dev.clone(), 195, gpu.minor)]));
        if !gpu.mig_mode {
            continue;
        }
        let devices = mig_devices(gpu);
        if devices.is_empty() {
            return Err(format!(
                "failed to generate CDI spec: failed to create device CDI specs: failed to get MIG devices for GPU {}: no MIG devices",
                gpu.uuid
            ));
        }
        for (inst, ci, _) in devices {
            let gi = gi_cap_minor(gpu.minor, inst.gi);
            let cap = |m: u32| node(format!("/dev/nvidia-caps/nvidia-cap{m}"), 508, m);
            out.push((
                ci.uuid.clone(),
                vec![
                    node(dev.clone(), 195, gpu.minor),
                    cap(gi),
                    cap(gi + 1 + ci.ci),
                ],
            ));
        }
    }
    Ok(out)
}

fn common_nodes() -> Vec<CdiNode> {
    vec![
        node("/dev/nvidiactl".into(), 195, 255),
        node("/dev/nvidia-uvm".into(), 234, 0),
        node("/dev/nvidia-uvm-tools".into(), 234, 1),
    ]
}

/// The CDI spec as JSON.
pub fn cdi_json(devices: &[(String, Vec<CdiNode>)]) -> String {
    let nodes = |nodes: &[CdiNode]| -> Vec<serde_json::Value> {
        nodes
            .iter()
            .map(|n| {
                let mut v = serde_json::json!({
                    "path": n.path, "hostPath": n.path, "major": n.major, "permissions": "rwm"
                });
                if n.minor != 0 {
                    v["minor"] = n.minor.into();
                }
                v
            })
            .collect()
    };
    let spec = serde_json::json!({
        "cdiVersion": "0.5.0",
        "kind": "nvidia.com/gpu",
        "devices": devices.iter().map(|(name, n)| serde_json::json!({
            "name": name, "containerEdits": { "deviceNodes": nodes(n) }
        })).collect::<Vec<_>>(),
        "containerEdits": {
            "env": ["NVIDIA_VISIBLE_DEVICES=void"],
            "deviceNodes": nodes(&common_nodes()),
        },
    });
    let mut text = serde_json::to_string_pretty(&spec).unwrap_or_default();
    text.push('\n');
    text
}

/// The CDI spec as YAML, in nvidia-ctk's layout (4-space indents, `minor` left out when 0).
pub fn cdi_yaml(devices: &[(String, Vec<CdiNode>)]) -> String {
    fn nodes(out: &mut String, indent: &str, nodes: &[CdiNode]) {
        for n in nodes {
            let _ = writeln!(out, "{indent}- path: {}", n.path);
            let _ = writeln!(out, "{indent}  hostPath: {}", n.path);
            let _ = writeln!(out, "{indent}  major: {}", n.major);
            if n.minor != 0 {
                let _ = writeln!(out, "{indent}  minor: {}", n.minor);
            }
            let _ = writeln!(out, "{indent}  permissions: rwm");
        }
    }
    let mut out = String::from("---\ncdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices:\n");
    for (name, n) in devices {
        let _ = writeln!(out, "    - name: {name}");
        out.push_str("      containerEdits:\n          deviceNodes:\n");
        nodes(&mut out, "              ", n);
    }
    out.push_str(
        "containerEdits:\n    env:\n        - NVIDIA_VISIBLE_DEVICES=void\n    deviceNodes:\n",
    );
    nodes(&mut out, "        ", &common_nodes());
    out
}

/// Installs the fakes on a copy of a fake host: writes `state` to `<host>/mig-state.json`
/// (its `replay` the repository's `testdata/hosts/replay-nvidia-smi`, its `answers`
/// `<host>/answers`), and makes `<host>/bin/nvidia-smi` and `<host>/bin/nvidia-ctk` wrappers
/// of `bin_dir`'s `bcd-fake-nvidia-smi` and `bcd-fake-nvidia-ctk`. Returns the state's path.
/// Panics on failure (for tests).
pub fn install_fake_smi(host: &Path, state: &FakeSmiState, bin_dir: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt as _;
    let mut state = state.clone();
    state.replay = crate::hosts::hosts_dir().join("replay-nvidia-smi");
    state.answers = host.join("answers");
    let path = host.join("mig-state.json");
    state.save(&path);
    let bin = host.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    for (name, program) in [
        ("nvidia-smi", "bcd-fake-nvidia-smi"),
        ("nvidia-ctk", "bcd-fake-nvidia-ctk"),
    ] {
        let wrapper = bin.join(name);
        let _ = std::fs::remove_file(&wrapper);
        std::fs::write(
            &wrapper,
            format!(
                "#!/bin/sh\nexec '{}' '{}' \"$@\"\n",
                bin_dir.join(program).display(),
                path.display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    path
}

/// The state file of a host on which [`install_fake_smi`] ran.
pub fn state_path(host: &Path) -> PathBuf {
    host.join("mig-state.json")
}

/// The argument lines the fakes recorded on a host (`calls.log` beside its state), oldest
/// first; empty when none.
pub fn calls(host: &Path) -> Vec<String> {
    std::fs::read_to_string(calls_path(&state_path(host)))
        .map(|t| t.lines().map(str::to_owned).collect())
        .unwrap_or_default()
}

/// The committed initial state of the `a100-mig` host (paths still relative).
pub fn a100_mig_state() -> FakeSmiState {
    FakeSmiState::load(&crate::hosts::hosts_dir().join("a100-mig/mig-state.json"))
}
