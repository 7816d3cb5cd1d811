//! `bcd node --nfd-features-dir DIR`: the node's labels computed again at each change of what
//! they depend on (a collection, an XID, a reset) and kept in Node Feature Discovery's
//! feature file `DIR/bcd` ([`super::nfd`]). A consumer of the node like the device plugins:
//! it reads the node through [`DeviceSource`] alone and shows its problem through
//! [`Report`].

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use tokio::sync::watch;

use super::nfd::{keep, FeatureFile};
use super::{hold_while_silent, node_labels, nvidia_smi_answered, HostFacts, LabelConfig, Labels};
use crate::source::{DeviceSource, Report};
use crate::sys::host::Host;

/// How often the labels are computed again without a change signal: a net under the signals
/// (the labels cost a verdict and two sysfs reads).
pub const RECOMPUTE_EVERY: Duration = Duration::from_secs(60);

/// What the feature file's keeper shows in the node's `status`: why the file cannot be
/// written, while it cannot.
#[derive(Debug, Default)]
pub struct FileReport {
    problem: Mutex<Option<String>>,
}

impl FileReport {
    /// Sets or clears the problem; logged when it starts, changes and ends.
    pub fn set(&self, sentence: Option<String>) {
        if let Ok(mut p) = self.problem.lock() {
            match (p.as_ref(), sentence.as_ref()) {
                (old, Some(s)) if old != Some(s) => tracing::error!("{s}"),
                (Some(_), None) => tracing::info!("the node labels are written again"),
                _ => {}
            }
            *p = sentence;
        }
    }
}

impl Report for FileReport {
    fn problem(&self) -> Option<String> {
        self.problem.lock().ok().and_then(|p| p.clone())
    }

    fn metrics_text(&self) -> String {
        String::new()
    }
}

/// Keeps the feature file in `dir` for as long as the node runs, for the node `source` on
/// `host`, showing a failed write in `report`.
///
/// Nothing is written while the inventory lists no GPU (before the first collection, or
/// while the driver lists none): the file a previous run left stays as it was, and, no
/// longer refreshed, its labels expire within the hour. While `nvidia-smi` does not answer,
/// the labels of its last answer stay (this run's, or those of that file that have not
/// expired), see [`hold_while_silent`].
pub async fn keep_feature_file<S: DeviceSource>(
    source: Arc<S>,
    host: Host,
    dir: PathBuf,
    report: Arc<FileReport>,
) {
    let file = FeatureFile::new(&dir);
    for temp in file.remove_crash_temps() {
        tracing::warn!(
            "removed {}, left by a write a crash cut off",
            temp.display()
        );
    }
    let mut last_answer = match file.read_back(SystemTime::now()) {
        Ok(labels) => labels,
        Err(e) => {
            tracing::warn!("{e}; it is replaced once there are labels");
            None
        }
    };
    let (tx, rx) = watch::channel::<Option<Labels>>(None);
    let labeller = async {
        let mut changes = source.changes();
        loop {
            let inventory = source.inventory().await;
            let labels = if inventory.gpu.gpus.is_empty() {
                None
            } else {
                let verdicts = source.verdicts().await;
                let config = LabelConfig {
                    gpu_slots: source.gpu_slots(),
                    mig_layout: source.mig_layout(),
                    reboot_required: !source.reboot_required().is_empty(),
                };
                let fresh = node_labels(&inventory, &verdicts, &HostFacts::read(&host), &config);
                let answered = nvidia_smi_answered(&inventory);
                let labels = hold_while_silent(fresh, answered, last_answer.as_ref());
                if answered {
                    last_answer = Some(labels.clone());
                }
                Some(labels)
            };
            tx.send_if_modified(|now| {
                let changed = *now != labels;
                *now = labels;
                changed
            });
            tokio::select! {
                alive = changes.changed() => {
                    if !alive {
                        return;
                    }
                }
                () = tokio::time::sleep(RECOMPUTE_EVERY) => {}
            }
        }
    };
    let writer = keep(rx, file, SystemTime::now, |problem| report.set(problem));
    tokio::join!(labeller, writer);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::labels::nfd::{parse, FILE_NAME};

    fn read_labels(path: &std::path::Path) -> Option<Labels> {
        let text = std::fs::read_to_string(path).ok()?;
        let mut out = Labels::default();
        for line in parse(&text).ok()? {
            out.insert(line.name, line.value).ok()?;
        }
        Some(out)
    }

    async fn until(what: &str, mut ready: impl FnMut() -> bool) {
        for _ in 0..400 {
            if ready() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!("{what} did not happen");
    }

    fn start(node: &Arc<crate::node::shared::Node>, dir: PathBuf) -> tokio::task::JoinHandle<()> {
        let report = Arc::new(FileReport::default());
        node.add_report(report.clone());
        tokio::spawn(keep_feature_file(
            node.clone(),
            node.config().host.clone(),
            dir,
            report,
        ))
    }

    // The whole path on a fake host: a MIG layout changed by hand (another profile on GPU 1)
    // is in the file after the collection that sees it, and not before.
    #[tokio::test]
    async fn a_collection_that_sees_a_mig_layout_change_changes_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let copy = crate::health::status::tests::copy_host(dir.path(), "a100-mig");
        let node = Arc::new(crate::node::shared::test_node_on(
            dir.path(),
            Host::fake(&copy),
        ));
        let features = dir.path().join("features.d");
        std::fs::create_dir(&features).unwrap();
        let path = features.join(FILE_NAME);
        let task = start(&node, features.clone());
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(!path.exists(), "nothing before the first collection");

        node.collect_now().await;
        until("the first labels", || read_labels(&path).is_some()).await;
        let first = read_labels(&path).unwrap();
        assert_eq!(first.get("nvidia.com/mig-1g.10gb.count"), Some("1"));
        assert_eq!(first.get("nvidia.com/mig-3g.40gb.count"), Some("2"));

        let listed = copy.join("answers/L.out");
        let text = std::fs::read_to_string(&listed).unwrap();
        std::fs::write(&listed, text.replace("MIG 1g.10gb ", "MIG 3g.40gb ")).unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(read_labels(&path), Some(first), "no collection, no change");

        node.collect_now().await;
        until("the new layout's labels", || {
            read_labels(&path).is_some_and(|l| l.get("nvidia.com/mig-3g.40gb.count") == Some("3"))
        })
        .await;
        let second = read_labels(&path).unwrap();
        assert_eq!(second.get("nvidia.com/mig-1g.10gb.count"), None);
        assert!(node
            .problems_now()
            .iter()
            .all(|p| !p.contains("node labels")));
        task.abort();
    }

    // A folder that is not there: said in status, in one sentence (its clearing once a write
    // succeeds is `labels::nfd`'s test, on paused time).
    #[tokio::test]
    async fn a_write_that_fails_is_in_status_in_one_sentence() {
        let dir = tempfile::tempdir().unwrap();
        let node = Arc::new(crate::node::shared::test_node(dir.path()));
        let task = start(&node, dir.path().join("missing"));
        node.collect_now().await;
        until("the problem in status", || {
            node.problems_now()
                .iter()
                .any(|p| p.starts_with("the node labels could not be written"))
        })
        .await;
        let said: Vec<String> = node
            .problems_now()
            .into_iter()
            .filter(|p| p.contains("node labels"))
            .collect();
        assert_eq!(said.len(), 1, "{said:?}");
        task.abort();
    }
}
