//! Conformance over real `nvidia-smi` captures gathered by others (`../shared/fixtures/real`,
//! listed in its MANIFEST.md): every `-L`, `topo -m`, `nvlink -s`, `mig` and `--query-gpu`
//! CSV capture must parse, and yield what the file visibly shows. When the folder is absent
//! (a checkout without the shared fixtures) each test prints a notice and passes.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use bcd::smi::{list, mig, nvlink, samples, topo};

/// The real captures' folder, or `None` (skipped, also under CI) when this checkout lacks it.
fn real(kind: &str) -> Option<Vec<(String, Vec<u8>)>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../shared/fixtures/real")
        .join(kind);
    if !dir.is_dir() {
        bcd_testkit::skip(
            "the real captures (../shared/fixtures/real) are not beside this checkout",
        );
        return None;
    }
    let mut files: Vec<PathBuf> = fs::read_dir(&dir)
        .expect("read the captures folder")
        .map(|e| e.expect("folder entry").path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    Some(
        files
            .into_iter()
            .map(|p| {
                let name = p.file_name().unwrap().to_string_lossy().into_owned();
                (name, fs::read(&p).expect("read a capture"))
            })
            .collect(),
    )
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Lines that start a GPU block (`GPU <n>:`), as the parsers should count them.
fn gpu_lines(text: &str) -> usize {
    text.lines()
        .filter(|l| {
            l.strip_prefix("GPU ")
                .and_then(|r| r.split_once(':'))
                .is_some_and(|(n, _)| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        })
        .count()
}

fn check_list(name: &str, bytes: &[u8]) {
    let gpus = list::parse_list(bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
    let text = text(bytes);
    assert_eq!(gpus.len(), gpu_lines(&text), "{name}: GPU count");
    let mig_lines = text
        .lines()
        .filter(|l| l.trim_start().starts_with("MIG "))
        .count();
    let migs: usize = gpus.iter().map(|g| g.mig.len()).sum();
    assert_eq!(migs, mig_lines, "{name}: MIG device count");
    for gpu in &gpus {
        assert!(gpu.uuid.starts_with("GPU-"), "{name}: {}", gpu.uuid);
        for (i, m) in gpu.mig.iter().enumerate() {
            assert_eq!(
                m.device as usize, i,
                "{name}: MIG devices numbered in order"
            );
            assert!(m.uuid.starts_with("MIG-"), "{name}: {}", m.uuid);
        }
    }
    if name.contains("h200-mig") {
        // The compute-instance-prefixed profile names of R590.
        assert_eq!(gpus[0].mig[0].profile, "1c.3g.71gb");
        assert_eq!(gpus[0].mig.len(), 5);
    }
}

fn check_topo(name: &str, bytes: &[u8]) {
    let text = text(bytes);
    if !text.contains("GPU0") {
        // Windows R591 answers `topo -m` with an option error: not a matrix, and said so.
        let err = topo::parse_topo(bytes).expect_err(name);
        assert!(err.to_string().contains("Option -m"), "{name}: {err}");
        return;
    }
    let rows = topo::parse_topo(bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
    let header = text
        .lines()
        .next()
        .unwrap_or_default()
        .replace("\u{1b}[4m", "")
        .replace("\u{1b}[0m", "");
    let gpu_columns = header
        .split('\t')
        .filter(|c| {
            c.starts_with("GPU") && c[3..].bytes().all(|b| b.is_ascii_digit()) && c.len() > 3
        })
        .count();
    assert!(gpu_columns >= 1, "{name}: header has GPU columns");
    assert_eq!(rows.len(), gpu_columns, "{name}: one row per GPU column");
    for row in &rows {
        assert_eq!(row.peers.len(), gpu_columns - 1, "{name}: GPU{}", row.gpu);
    }
    if name.contains("windows") {
        // The Windows R610 matrix has empty affinity cells.
        assert_eq!(rows[0].cpu_affinity, None, "{name}");
        assert_eq!(rows[0].numa_affinity, None, "{name}");
    } else {
        assert!(rows[0].cpu_affinity.is_some(), "{name}: CPU affinity");
    }
}

fn check_nvlink(name: &str, bytes: &[u8]) {
    let gpus = nvlink::parse_status(bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
    let text = text(bytes);
    assert_eq!(gpus.len(), gpu_lines(&text), "{name}: GPU count");
    let link_lines = text
        .lines()
        .filter(|l| l.trim_start().starts_with("Link "))
        .count();
    assert_eq!(
        gpus.iter().map(|g| g.links.len()).sum::<usize>(),
        link_lines,
        "{name}"
    );
    for gpu in &gpus {
        if gpu.links.is_empty() {
            let note = gpu
                .unavailable
                .as_deref()
                .unwrap_or_default()
                .to_ascii_lowercase();
            assert!(
                note.contains("nvlink"),
                "{name}: refusal kept as a note: {note:?}"
            );
        } else {
            assert_eq!(gpu.unavailable, None, "{name}");
            assert!(gpu.links.iter().all(
                |l| matches!(l.state, nvlink::LinkState::Active { speed_gbps: Some(s) } if s > 0.0)
            ));
        }
    }
    if name.contains("a100") {
        assert_eq!(gpus.len(), 8, "{name}");
        assert!(
            gpus.iter().all(|g| g.links.len() == 12),
            "{name}: 12 links per A100"
        );
    }
    if name.contains("h100-80gb-hbm3") || name.contains("h200-590") {
        assert_eq!(gpus[0].links.len(), 18, "{name}: 18 links per Hopper");
    }
    if name.contains("empty") {
        assert!(bytes.is_empty() && gpus.is_empty(), "{name}");
    }
}

/// `MIG <name>` table rows of a boxed `mig` table.
fn mig_row_names(text: &str) -> Vec<String> {
    text.lines()
        .filter(|l| l.starts_with('|'))
        .filter_map(|l| {
            let cells: Vec<&str> = l.trim_matches('|').split_whitespace().collect();
            match cells.as_slice() {
                [gpu, "MIG", name, ..] if gpu.parse::<u32>().is_ok() => Some((*name).to_owned()),
                _ => None,
            }
        })
        .collect()
}

fn check_mig(name: &str, bytes: &[u8]) -> bool {
    let text = text(bytes);
    if name.ends_with("-lgi.txt") {
        let instances = mig::parse_instances(bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
        let names: Vec<_> = instances.iter().map(|i| i.name.clone()).collect();
        assert_eq!(names, mig_row_names(&text), "{name}");
        assert!(
            instances.iter().all(|i| i.placement.is_some()),
            "{name}: placements"
        );
        return true;
    }
    if name.contains("lgip") && !name.contains("lgipp") {
        let profiles = mig::parse_profiles(bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
        let names: Vec<_> = profiles.iter().map(|p| p.name.clone()).collect();
        assert_eq!(names, mig_row_names(&text), "{name}");
        for p in &profiles {
            assert!(p.memory_gib.is_some() && p.sm.is_some(), "{name}: {p:?}");
            assert!(
                p.ce.is_some() && p.jpeg.is_some() && p.ofa.is_some(),
                "{name}: second row of {}",
                p.name
            );
            assert!(p.instances_free <= p.instances_total, "{name}: {p:?}");
        }
        if name.contains("no-mig") {
            assert!(profiles.is_empty(), "{name}: no MIG is an empty list");
        }
        if name.contains("all-used") {
            assert!(profiles.iter().all(|p| p.instances_free == 0), "{name}");
            assert!(names.contains(&"1g.6gb+me".to_owned()), "{name}");
        }
        if name.contains("seansiddens") {
            assert!(names.contains(&"1g.5gb+me".to_owned()), "{name}");
            let me = profiles.iter().find(|p| p.name == "1g.5gb+me").unwrap();
            assert_eq!((me.id, me.ofa), (20, Some(1)), "{name}");
        }
        if name.contains("old-format") {
            assert_eq!(profiles.len(), 5, "{name}");
            assert_eq!(profiles[2].memory_gib, Some(19.62), "{name}");
        }
        return true;
    }
    if name.contains("lgipp") {
        // The MIG layouts' fit check reads placements from `-lgipp`.
        let placements = mig::parse_placements(bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
        let lines = text
            .lines()
            .filter(|l| l.trim_start().starts_with("GPU"))
            .count();
        assert_eq!(placements.len(), lines, "{name}");
        assert!(
            placements
                .iter()
                .all(|p| !p.starts.is_empty() && p.size > 0),
            "{name}: {placements:?}"
        );
        return true;
    }
    // `-lcip` (compute-instance profiles) is not a query bcd makes.
    false
}

/// Builds the sample query's answer from a query-gpu CSV row, so the sample parser meets
/// real values (with their units and no-value spellings).
fn sample_line(row: &BTreeMap<String, Option<String>>) -> String {
    samples::SAMPLE_FIELDS
        .split(',')
        .map(|f| match f {
            "clocks.sm" => "clocks.current.sm",
            "clocks.mem" => "clocks.current.memory",
            other => other,
        })
        .map(|f| {
            row.get(f)
                .or_else(|| row.get(&renamed_clock_reason(f)))
                .cloned()
                .flatten()
                .unwrap_or_else(|| "[N/A]".into())
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// A `clocks_throttle_reasons.*` field as R535 and later print it in a CSV header
/// (`clocks_event_reasons.*`; the old name is accepted in the query and is an alias).
fn renamed_clock_reason(field: &str) -> String {
    field.replacen("clocks_throttle_reasons.", "clocks_event_reasons.", 1)
}

fn check_query_gpu_csv(name: &str, bytes: &[u8]) {
    let rows = samples::parse_query_gpu_csv(bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
    let data_lines = text(bytes).lines().filter(|l| !l.trim().is_empty()).count() - 1;
    assert_eq!(rows.len(), data_lines, "{name}");
    for row in &rows {
        let uuid = row["uuid"].as_deref().unwrap_or_default();
        assert!(uuid.starts_with("GPU-"), "{name}: {uuid}");
        assert!(
            !row.keys().any(|k| k.contains('[')),
            "{name}: unit suffixes stripped"
        );
        assert!(
            row.values().flatten().all(|v| !v.contains("N/A")),
            "{name}: no-value spellings absent"
        );
        if !row.contains_key("memory.total") {
            continue;
        }
        let line = sample_line(row);
        let parsed =
            samples::parse_samples(line.as_bytes()).unwrap_or_else(|e| panic!("{name}: {e}"));
        // A GPU in MIG mode is sampled from its row like any other (the real R590 MIG
        // captures print the whole GPU's row).
        let samples::SampleParse::Samples(got) = parsed else {
            panic!("{name}: {parsed:?}")
        };
        let total = row["memory.total"]
            .as_deref()
            .and_then(|v| v.split(' ').next()?.parse().ok());
        assert_eq!(got[0].memory_total_mib, total, "{name}");
        assert!(got[0].memory_total_mib.is_some(), "{name}");
        if row["mig.mode.current"].as_deref() == Some("Enabled") {
            assert_eq!(got[0].mig_mode, Some(true), "{name}");
        }
        // The clock reasons, field-exact: every capture prints `Active` or `Not Active`.
        let events = got[0].clock_events;
        let read = [
            events.hw_slowdown,
            events.hw_thermal_slowdown,
            events.hw_power_brake_slowdown,
            events.sw_thermal_slowdown,
        ];
        for (field, got) in samples::CLOCK_REASON_FIELDS.iter().zip(read) {
            let cell = row
                .get(*field)
                .or_else(|| row.get(&renamed_clock_reason(field)))
                .cloned()
                .flatten();
            let want = match cell.as_deref() {
                Some("Active") => Some(true),
                Some("Not Active") => Some(false),
                other => panic!("{name}: {field} is {other:?}"),
            };
            assert_eq!(got, want, "{name}: {field}");
        }
    }
    if name.contains("-mig-") {
        assert_eq!(
            rows[0]["mig.mode.current"].as_deref(),
            Some("Enabled"),
            "{name}"
        );
    }
}

/// Splits a multi-command capture into `(title, body)` sections: a `#` rule, `# title`, any
/// `# $ command` lines, a `#` rule, then the body.
fn sections(text: &str) -> Vec<(String, String)> {
    let rule = |l: &str| l.len() > 40 && l.bytes().all(|b| b == b'#');
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        if rule(lines[i]) && i + 1 < lines.len() && !rule(lines[i + 1]) {
            let title = lines[i + 1].trim_start_matches('#').trim().to_owned();
            let mut j = i + 2;
            while j < lines.len() && !rule(lines[j]) {
                j += 1;
            }
            let start = j + 1;
            let mut end = start;
            while end < lines.len() && !rule(lines[end]) {
                end += 1;
            }
            let body = lines.get(start..end).unwrap_or_default().join("\n");
            out.push((title, body));
            i = end;
        } else {
            i += 1;
        }
    }
    out
}

fn check_capture(name: &str, bytes: &[u8]) {
    let text = text(bytes);
    let mut seen = 0;
    for (title, body) in sections(&text) {
        // The collector appends `# (exit code: N)` after a failed command.
        let failed = body.contains("# (exit code:");
        let body: String = body
            .lines()
            .filter(|l| !l.starts_with("# (exit code:"))
            .collect::<Vec<_>>()
            .join("\n");
        let what = format!("{name} [{title}]");
        if title == "capabilities :: list (-L)" {
            check_list(&what, body.as_bytes());
        } else if title == "capabilities :: topo -m" {
            check_topo(&what, body.as_bytes());
            assert_eq!(failed, topo::parse_topo(body.as_bytes()).is_err(), "{what}");
        } else if title == "capabilities :: nvlink -s" {
            check_nvlink(&what, body.as_bytes());
        } else if title.ends_with(":: query-gpu (csv, what the exporter parses)") {
            check_query_gpu_csv(&what, body.trim_end().as_bytes());
        } else if title.ends_with(":: query-compute-apps (per-process)") {
            let counts = samples::count_compute_apps(body.as_bytes());
            let processes = body
                .lines()
                .skip(1)
                .filter(|l| !l.trim().is_empty())
                .count();
            // This query asked for more columns; the UUID is the fifth, so nothing counts.
            assert!(counts.is_empty(), "{what}");
            let uuids: String = body
                .lines()
                .skip(1)
                .filter_map(|l| l.split(',').nth(4))
                .map(|u| format!("{}\n", u.trim()))
                .collect();
            let counted: u32 = samples::count_compute_apps(uuids.as_bytes()).values().sum();
            assert_eq!(counted as usize, processes, "{what}");
        } else {
            continue;
        }
        seen += 1;
    }
    assert!(seen >= 6, "{name}: found only {seen} known sections");
}

#[test]
fn list_captures() {
    let Some(files) = real("list") else { return };
    assert!(!files.is_empty());
    for (name, bytes) in &files {
        check_list(name, bytes);
    }
}

#[test]
fn topo_captures() {
    let Some(files) = real("topo") else { return };
    assert!(!files.is_empty());
    for (name, bytes) in &files {
        check_topo(name, bytes);
    }
}

#[test]
fn nvlink_captures() {
    let Some(files) = real("nvlink") else { return };
    assert!(!files.is_empty());
    for (name, bytes) in &files {
        check_nvlink(name, bytes);
    }
}

#[test]
fn mig_captures() {
    let Some(files) = real("mig") else { return };
    let read = files
        .iter()
        .filter(|(name, bytes)| check_mig(name, bytes))
        .count();
    assert!(read >= 6, "only {read} mig captures read");
}

#[test]
fn csv_captures() {
    let Some(files) = real("csv") else { return };
    let mut read = 0;
    for (name, bytes) in &files {
        if name.ends_with(".capture.txt") {
            check_capture(name, bytes);
        } else if name.ends_with(".csv") {
            check_query_gpu_csv(name, bytes);
        } else if name == "netdata-help-query-gpu.txt" {
            // The field catalogue: every sample field must be a field the driver documents.
            let help = text(bytes);
            for field in samples::SAMPLE_FIELDS.split(',') {
                assert!(
                    help.contains(&format!("\"{field}\"")),
                    "{field} is not in --help-query-gpu"
                );
            }
        } else {
            // `*.samples.txt`: the same -L and CSV as their sliced files, with shell prompts.
            continue;
        }
        read += 1;
    }
    assert!(read >= 20, "only {read} csv captures read");
}
