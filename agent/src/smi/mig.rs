//! `nvidia-smi mig -lgip` (the GPU instance profiles each MIG GPU offers) and `mig -lgi`
//! (the GPU instances that exist).
//!
//! Both are boxed tables. Each `-lgip` profile takes two rows: the first holds
//! `GPU  Name  ID  Free/Total  Memory(GiB)  P2P  SM  DEC  ENC`, the second (under the SM
//! column) `CE  JPEG  OFA`. R450 printed a narrower table with the same columns; both read
//! alike, since cells are read by order, not by position. Names keep their variant suffix
//! (`1g.5gb+me`, `1g.10gb+gfx`, `1g.24gb-me`) and lose the `MIG ` prefix. The answer
//! `No MIG-enabled devices found.` is an empty list.
//!
//! `-lgi` rows are `GPU  Name  Profile-ID  Instance-ID  Start:Size`.
//!
//! `mig -lgipp` (where each profile may be placed) prints one line per profile:
//! `GPU  0 Profile ID 14 Placements: {0,1,2,3}:1` (`Placement :` when there is one).

use thiserror::Error;

use super::{list::quote, text, value};

/// One GPU instance profile of one GPU, from `mig -lgip`.
#[derive(Debug, Clone, PartialEq)]
pub struct MigProfile {
    /// The GPU index.
    pub gpu: u32,
    /// The profile name without `MIG `: `1g.5gb`, `1g.5gb+me`.
    pub name: String,
    /// The profile id (`19`).
    pub id: u32,
    /// Instances of this profile that could still be created.
    pub instances_free: u32,
    /// Instances of this profile the GPU holds at most.
    pub instances_total: u32,
    /// Memory per instance in GiB (`4.75`).
    pub memory_gib: Option<f64>,
    /// Whether peer-to-peer is supported (`P2P` column).
    pub p2p: Option<bool>,
    /// Streaming multiprocessors per instance.
    pub sm: Option<u32>,
    /// Video decoders.
    pub dec: Option<u32>,
    /// Video encoders.
    pub enc: Option<u32>,
    /// Copy engines (second row).
    pub ce: Option<u32>,
    /// JPEG decoders (second row).
    pub jpeg: Option<u32>,
    /// Optical-flow accelerators (second row).
    pub ofa: Option<u32>,
}

/// Where a GPU instance sits in the GPU's memory slices.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placement {
    /// First slice.
    pub start: u32,
    /// Number of slices.
    pub size: u32,
}

/// One GPU instance, from `mig -lgi`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MigInstance {
    /// The GPU index.
    pub gpu: u32,
    /// The profile name without `MIG `.
    pub name: String,
    /// The profile id.
    pub profile_id: u32,
    /// The GPU instance id (`gi` in the inventory).
    pub instance_id: u32,
    /// Its placement, when printed as `start:size`.
    pub placement: Option<Placement>,
}

/// Where one profile of one GPU may be placed, from `mig -lgipp`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProfilePlacements {
    /// The GPU index.
    pub gpu: u32,
    /// The profile id.
    pub profile_id: u32,
    /// The first memory slice of each possible placement.
    pub starts: Vec<u32>,
    /// The memory slices one instance takes.
    pub size: u32,
}

/// Why a `mig` table could not be read.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum MigError {
    /// A profile or instance row with a missing or unreadable cell.
    #[error("nvidia-smi mig {query}, line {line}: {what}: {text:?}")]
    Malformed {
        /// `-lgip` or `-lgi`.
        query: &'static str,
        /// 1-based line number.
        line: usize,
        /// What is wrong, in words.
        what: &'static str,
        /// The line, cut to a readable length.
        text: String,
    },
}

/// The cells of a table row: the text between its outer `|`, split on whitespace. `None` for
/// borders, blank lines and text outside the table.
fn row_cells(line: &str) -> Option<Vec<&str>> {
    let inner = line.trim().strip_prefix('|')?.strip_suffix('|')?;
    Some(inner.split_whitespace().collect())
}

/// A row that starts a profile or instance: `<gpu> MIG <name> ...` (or, defensively, a name
/// without the `MIG` word). Returns the GPU index, the name and the cells after it.
fn entry<'a>(cells: &[&'a str]) -> Option<(u32, &'a str, Vec<&'a str>)> {
    let gpu = cells.first()?.parse::<u32>().ok()?;
    let (name, rest) = match cells.get(1..)? {
        ["MIG", name, rest @ ..] => (*name, rest),
        [name, rest @ ..] if name.contains("g.") => (*name, rest),
        _ => return None,
    };
    Some((gpu, name, rest.to_vec()))
}

fn count(cell: Option<&&str>) -> Option<u32> {
    cell.and_then(|c| value::unsigned(c))
        .and_then(|n| u32::try_from(n).ok())
}

/// Parses `nvidia-smi mig -lgip`.
///
/// Guarantees: one [`MigProfile`] per profile row, in output order; the `CE JPEG OFA` row
/// under a profile fills that profile. `No MIG-enabled devices found.` and any answer without
/// a profile row give an empty list.
///
/// # Errors
///
/// [`MigError`] for a profile row whose id or `free/total` cell is missing or not numbers.
pub fn parse_profiles(bytes: &[u8]) -> Result<Vec<MigProfile>, MigError> {
    let text = text::decode(bytes);
    let mut profiles: Vec<MigProfile> = Vec::new();
    // Whether the previous table row started a profile, so the next may continue it.
    let mut open = false;
    for (line, raw) in text::numbered_lines(&text) {
        let Some(cells) = row_cells(raw) else {
            open = false;
            continue;
        };
        let malformed = |what| MigError::Malformed {
            query: "-lgip",
            line,
            what,
            text: quote(raw),
        };
        if let Some((gpu, name, rest)) = entry(&cells) {
            let id =
                count(rest.first()).ok_or_else(|| malformed("the profile id is not a number"))?;
            let (free, total) = rest
                .get(1)
                .and_then(|c| c.split_once('/'))
                .and_then(|(f, t)| Some((f.parse::<u32>().ok()?, t.parse::<u32>().ok()?)))
                .ok_or_else(|| malformed("the Free/Total cell is not n/m"))?;
            profiles.push(MigProfile {
                gpu,
                name: name.to_owned(),
                id,
                instances_free: free,
                instances_total: total,
                memory_gib: rest.get(2).and_then(|c| value::number(c)),
                p2p: rest.get(3).and_then(|c| value::flag(c)),
                sm: count(rest.get(4)),
                dec: count(rest.get(5)),
                enc: count(rest.get(6)),
                ce: None,
                jpeg: None,
                ofa: None,
            });
            open = true;
        } else if open && !cells.is_empty() && cells.iter().all(|c| c.parse::<u32>().is_ok()) {
            if let Some(profile) = profiles.last_mut() {
                profile.ce = count(cells.first());
                profile.jpeg = count(cells.get(1));
                profile.ofa = count(cells.get(2));
            }
            open = false;
        } else {
            open = false;
        }
    }
    Ok(profiles)
}

/// Parses `nvidia-smi mig -lgi`.
///
/// Guarantees: one [`MigInstance`] per instance row, in output order; `No MIG-enabled devices
/// found.` or an answer without instance rows gives an empty list.
///
/// # Errors
///
/// [`MigError`] for an instance row whose profile or instance id is missing or not a number.
pub fn parse_instances(bytes: &[u8]) -> Result<Vec<MigInstance>, MigError> {
    let text = text::decode(bytes);
    let mut out = Vec::new();
    for (line, raw) in text::numbered_lines(&text) {
        let Some((gpu, name, rest)) = row_cells(raw).as_deref().and_then(entry) else {
            continue;
        };
        let malformed = |what| MigError::Malformed {
            query: "-lgi",
            line,
            what,
            text: quote(raw),
        };
        let profile_id =
            count(rest.first()).ok_or_else(|| malformed("the profile id is not a number"))?;
        let instance_id =
            count(rest.get(1)).ok_or_else(|| malformed("the instance id is not a number"))?;
        let placement = rest
            .get(2)
            .and_then(|c| c.split_once(':'))
            .and_then(|(s, z)| {
                Some(Placement {
                    start: s.parse().ok()?,
                    size: z.parse().ok()?,
                })
            });
        out.push(MigInstance {
            gpu,
            name: name.to_owned(),
            profile_id,
            instance_id,
            placement,
        });
    }
    Ok(out)
}

/// Parses `nvidia-smi mig -lgipp`.
///
/// Guarantees: one [`ProfilePlacements`] per line that starts `GPU`, in output order; `No
/// MIG-enabled devices found.` gives an empty list; other lines are skipped.
///
/// # Errors
///
/// [`MigError`] for a `GPU` line whose numbers or `{starts}:size` cannot be read.
pub fn parse_placements(bytes: &[u8]) -> Result<Vec<ProfilePlacements>, MigError> {
    let text = text::decode(bytes);
    let mut out = Vec::new();
    for (line, raw) in text::numbered_lines(&text) {
        let trimmed = raw.trim();
        let Some(rest) = trimmed.strip_prefix("GPU") else {
            continue;
        };
        let malformed = |what| MigError::Malformed {
            query: "-lgipp",
            line,
            what,
            text: quote(raw),
        };
        let (head, places) = rest
            .split_once(':')
            .ok_or_else(|| malformed("no ':' before the placements"))?;
        let words: Vec<&str> = head.split_whitespace().collect();
        let (gpu, profile_id) = match words.as_slice() {
            [gpu, "Profile", "ID", id, ..] => (
                gpu.parse::<u32>()
                    .map_err(|_| malformed("the GPU index is not a number"))?,
                id.parse::<u32>()
                    .map_err(|_| malformed("the profile id is not a number"))?,
            ),
            _ => return Err(malformed("not `GPU <n> Profile ID <id> Placements:`")),
        };
        let (set, size) = places
            .trim()
            .strip_prefix('{')
            .and_then(|p| p.split_once("}:"))
            .ok_or_else(|| malformed("the placements are not {starts}:size"))?;
        let size = size
            .trim()
            .parse::<u32>()
            .map_err(|_| malformed("the placement size is not a number"))?;
        let starts = set
            .split(',')
            .map(|s| s.trim().parse::<u32>())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|_| malformed("a placement start is not a number"))?;
        out.push(ProfilePlacements {
            gpu,
            profile_id,
            starts,
            size,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placements_read_both_spellings_and_refuse_garbage() {
        let text = b"GPU  0 Profile ID 14 Placements: {0,1,2,3}:1\nGPU  0 Profile ID  0 Placement : {0}:4\n";
        let p = parse_placements(text).unwrap();
        assert_eq!(
            p,
            [
                ProfilePlacements {
                    gpu: 0,
                    profile_id: 14,
                    starts: vec![0, 1, 2, 3],
                    size: 1
                },
                ProfilePlacements {
                    gpu: 0,
                    profile_id: 0,
                    starts: vec![0],
                    size: 4
                }
            ]
        );
        assert!(parse_placements(b"No MIG-enabled devices found.\n")
            .unwrap()
            .is_empty());
        assert!(parse_placements(b"GPU  0 Profile ID x Placements: {0}:1\n").is_err());
        assert!(parse_placements(b"GPU  0 Profile ID 9 Placements: {0,a}:4\n").is_err());
    }

    fn fixture(name: &str) -> Vec<u8> {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../testdata/smi/mig/");
        std::fs::read(format!("{path}{name}")).expect("fixture")
    }

    #[test]
    fn h100_profiles_with_me_and_second_rows() {
        let profiles = parse_profiles(&fixture("h100-80gb-lgip.txt")).unwrap();
        let names: Vec<_> = profiles.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "1g.10gb",
                "1g.10gb+me",
                "1g.20gb",
                "2g.20gb",
                "3g.40gb",
                "4g.40gb",
                "7g.80gb"
            ]
        );
        let me = &profiles[1];
        assert_eq!((me.id, me.instances_free, me.instances_total), (20, 1, 1));
        assert_eq!(me.memory_gib, Some(9.75));
        assert_eq!(me.p2p, Some(false));
        assert_eq!((me.sm, me.dec, me.enc), (Some(16), Some(1), Some(0)));
        assert_eq!((me.ce, me.jpeg, me.ofa), (Some(1), Some(1), Some(1)));
        let full = profiles.last().unwrap();
        assert_eq!(
            (full.id, full.instances_free, full.instances_total),
            (0, 0, 1)
        );
        assert_eq!((full.ce, full.jpeg, full.ofa), (Some(8), Some(7), Some(1)));
    }

    #[test]
    fn two_gpus_and_gfx_variants() {
        let profiles = parse_profiles(&fixture("2gpu-gfx-lgip.txt")).unwrap();
        assert_eq!(profiles.len(), 4);
        assert_eq!(profiles[2].gpu, 1);
        assert_eq!(profiles[1].name, "1g.24gb+gfx");
        assert_eq!(profiles[3].memory_gib, None, "N/A memory reads as absent");
    }

    #[test]
    fn no_mig_is_empty_not_an_error() {
        assert_eq!(
            parse_profiles(b"No MIG-enabled devices found.\n").unwrap(),
            vec![]
        );
        assert_eq!(
            parse_instances(b"No MIG-enabled devices found.\n").unwrap(),
            vec![]
        );
        assert_eq!(parse_profiles(b"").unwrap(), vec![]);
    }

    #[test]
    fn instances_with_placements() {
        let instances = parse_instances(&fixture("h100-80gb-lgi.txt")).unwrap();
        assert_eq!(instances.len(), 3);
        assert_eq!(
            instances[0],
            MigInstance {
                gpu: 0,
                name: "3g.40gb".into(),
                profile_id: 9,
                instance_id: 2,
                placement: Some(Placement { start: 0, size: 4 })
            }
        );
        assert_eq!(instances[2].name, "1g.10gb");
    }

    #[test]
    fn malformed_rows_name_the_line() {
        let err = parse_profiles(b"|  0  MIG 1g.5gb   x   7/7  |\n").unwrap_err();
        assert_eq!(
            err.to_string(),
            "nvidia-smi mig -lgip, line 1: the profile id is not a number: \"|  0  MIG 1g.5gb   x   7/7  |\""
        );
        let err = parse_profiles(b"\n|  0  MIG 1g.5gb  19   7  |\n").unwrap_err();
        assert!(matches!(err, MigError::Malformed { line: 2, .. }));
        let err = parse_instances(b"|  0  MIG 1g.5gb  19  |\n").unwrap_err();
        assert!(err.to_string().contains("-lgi, line 1"));
    }
}
