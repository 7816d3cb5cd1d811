use std::sync::{Arc, Mutex};
use std::time::UNIX_EPOCH;

use super::*;

fn labels(pairs: &[(&str, &str)]) -> Labels {
    let mut out = Labels::default();
    for (k, v) in pairs {
        out.insert(*k, *v).unwrap();
    }
    out
}

fn a() -> Labels {
    labels(&[
        ("nvidia.com/gpu.count", "2"),
        ("nvidia.com/mig-3g.40gb.count", "2"),
        ("nvidia.com/cuda.driver.rev", ""),
        ("bcd.dev/gpu.healthy", "2"),
    ])
}

fn b() -> Labels {
    labels(&[
        ("nvidia.com/gpu.count", "2"),
        ("nvidia.com/mig-3g.40gb.count", "1"),
        ("nvidia.com/mig-1g.10gb.count", "1"),
        ("bcd.dev/gpu.healthy", "2"),
    ])
}

fn as_labels(lines: &[FeatureLine]) -> Labels {
    labels(
        &lines
            .iter()
            .map(|l| (l.name.as_str(), l.value.as_str()))
            .collect::<Vec<_>>(),
    )
}

/// The expiry the file at `path` carries, read as NFD reads it.
fn expiry_of(path: &Path) -> SystemTime {
    let text = std::fs::read_to_string(path).unwrap();
    let lines = parse(&text).unwrap();
    let first = lines[0]
        .expires
        .expect("an expiry directive before the labels");
    assert!(lines.iter().all(|l| l.expires == Some(first)), "{text}");
    first
}

#[test]
fn the_file_reads_back_as_nfd_reads_it() {
    let at = UNIX_EPOCH + Duration::from_secs(1_767_225_600); // 2026-01-01T00:00:00Z
    let text = render(&a(), at);
    assert!(
        text.contains("\n# +expiry-time=2026-01-01T00:00:00Z\n"),
        "{text}"
    );
    assert!(text.ends_with("nvidia.com/mig-3g.40gb.count=2\n"), "{text}");
    let lines = parse(&text).unwrap();
    assert_eq!(as_labels(&lines), a());
    assert!(lines.iter().all(|l| l.expires == Some(at)));
    assert_eq!(unexpired(&text, at - Duration::from_secs(1)).unwrap(), a());
    assert!(
        unexpired(&text, at).unwrap().is_empty(),
        "expired at its time"
    );
}

#[test]
fn the_parser_follows_nfds_local_source() {
    let text = "\
# a comment
plain
with=value=and=more

# +expiry-time=2012-07-28T11:22:33Z
old=1
#+expiry-time=2080-07-28T11:22:33Z
new=2
# +no-label
hidden=3
shown=4
";
    let lines = parse(text).unwrap();
    let names: Vec<(&str, &str)> = lines
        .iter()
        .map(|l| (l.name.as_str(), l.value.as_str()))
        .collect();
    assert_eq!(
        names,
        [
            ("plain", "true"),
            ("with", "value=and=more"),
            ("old", "1"),
            ("new", "2"),
            ("shown", "4")
        ]
    );
    let now = bcd_protocol::time::parse_rfc3339("2026-01-01T00:00:00Z").unwrap();
    let kept: Vec<String> = parse(text)
        .unwrap()
        .into_iter()
        .filter(|l| l.expires.is_none_or(|t| t > now))
        .map(|l| l.name)
        .collect();
    assert_eq!(kept, ["plain", "with", "new", "shown"]);
    assert!(matches!(
        parse("# +expiry-time=tomorrow\nx=1\n"),
        Err(ParseError::Expiry { line: 1, .. })
    ));
    let big = "x=1\n".repeat(NFD_MAX_FILE / 4 + 1);
    assert!(matches!(parse(&big), Err(ParseError::TooLarge(_))));
}

// The file is replaced by rename, so a reader (NFD) sees the old labels or the new ones,
// never a part of either.
#[test]
fn a_reader_never_sees_the_file_half_written() {
    let dir = tempfile::tempdir().unwrap();
    let mut file = FeatureFile::new(dir.path());
    let start = Instant::now();
    file.write(&a(), SystemTime::now(), start).unwrap();
    let path = file.path.clone();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reader = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut reads = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let text = std::fs::read_to_string(&path).expect("the file is always there");
                let got = as_labels(&parse(&text).expect("a whole file"));
                assert!(got == a() || got == b(), "a torn file: {text:?}");
                reads += 1;
            }
            reads
        })
    };
    for i in 0..1_000 {
        let next = if i % 2 == 0 { b() } else { a() };
        file.write(&next, SystemTime::now(), start).unwrap();
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let reads = reader.join().unwrap();
    assert!(reads > 0);
    let left: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(left, [FILE_NAME], "no temporary file is left behind");
}

#[test]
fn a_restart_finds_the_last_labels_in_place() {
    let dir = tempfile::tempdir().unwrap();
    let wall = SystemTime::now();
    let mut first = FeatureFile::new(dir.path());
    first.write(&a(), wall, Instant::now()).unwrap();
    let written = std::fs::read(&first.path).unwrap();
    drop(first);
    // A crash cut a write off, and another program keeps its own file here.
    std::fs::write(dir.path().join(".bcd.tmp-4242"), "nvidia.com/gpu.co").unwrap();
    std::fs::write(dir.path().join("other"), "x=1\n").unwrap();
    let second = FeatureFile::new(dir.path());
    assert_eq!(
        second.remove_crash_temps(),
        [dir.path().join(".bcd.tmp-4242")]
    );
    assert_eq!(std::fs::read(&second.path).unwrap(), written, "untouched");
    assert_eq!(second.read_back(wall).unwrap(), Some(a()));
    assert_eq!(
        second.read_back(wall + EXPIRY_AHEAD).unwrap(),
        Some(Labels::default()),
        "an expired file's labels are not taken back"
    );
    assert!(
        second.due(&a(), Instant::now()),
        "the first write of a run is due"
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("other")).unwrap(),
        "x=1\n"
    );
    assert_eq!(
        FeatureFile::new(&dir.path().join("none"))
            .read_back(wall)
            .unwrap(),
        None
    );
}

#[test]
fn a_link_where_the_file_belongs_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("elsewhere");
    std::fs::write(&target, "keep me\n").unwrap();
    std::os::unix::fs::symlink(&target, dir.path().join(FILE_NAME)).unwrap();
    let mut file = FeatureFile::new(dir.path());
    let e = file
        .write(&a(), SystemTime::now(), Instant::now())
        .unwrap_err();
    assert!(e.to_string().contains("symbolic link"), "{e}");
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep me\n");
    assert!(file.read_back(SystemTime::now()).is_err());
}

/// A wall clock that moves with the paused runtime clock, from a fixed date.
fn paused_wall() -> impl Fn() -> SystemTime + Clone {
    let start = UNIX_EPOCH + Duration::from_secs(1_767_225_600);
    let t0 = Instant::now();
    move || start + (Instant::now() - t0)
}

/// Lets the spawned writer run what is due now, without moving the clock.
async fn settle() {
    for _ in 0..20 {
        tokio::task::yield_now().await;
    }
}

#[tokio::test(start_paused = true)]
async fn a_running_node_keeps_the_expiry_ahead_and_a_change_is_written_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(FILE_NAME);
    let wall = paused_wall();
    let (tx, rx) = watch::channel(None);
    let reports = Arc::new(Mutex::new(Vec::new()));
    let seen = reports.clone();
    let writer = tokio::spawn(keep(
        rx,
        FeatureFile::new(dir.path()),
        wall.clone(),
        move |r| seen.lock().unwrap().push(r),
    ));
    settle().await;
    assert!(!path.exists(), "nothing is written before the first labels");

    tx.send_replace(Some(a()));
    settle().await;
    assert_eq!(
        as_labels(&parse(&std::fs::read_to_string(&path).unwrap()).unwrap()),
        a()
    );
    assert_eq!(expiry_of(&path), wall() + EXPIRY_AHEAD);

    // Three hours, a minute at a time: the expiry stays ahead, by at most an hour, and is
    // moved every 20 minutes.
    let mut expiries = std::collections::BTreeSet::new();
    for minute in 1..=180u64 {
        tokio::time::advance(Duration::from_secs(60)).await;
        settle().await;
        let expiry = expiry_of(&path);
        let now = wall();
        assert!(expiry > now, "minute {minute}: the labels expired");
        assert!(expiry <= now + EXPIRY_AHEAD, "minute {minute}");
        expiries.insert(expiry);
        // The same labels from a collection change nothing.
        if minute % 10 == 0 {
            tx.send_replace(Some(a()));
            settle().await;
            assert_eq!(
                expiry_of(&path),
                expiry,
                "minute {minute}: rewritten unchanged"
            );
        }
    }
    assert_eq!(
        expiries.len(),
        10,
        "one write at the start, then one every 20 minutes"
    );

    // A collection that sees another MIG layout: written at once, without the clock moving.
    tokio::time::advance(Duration::from_secs(7 * 60)).await;
    settle().await;
    let before = expiry_of(&path);
    tx.send_replace(Some(b()));
    settle().await;
    assert_eq!(
        as_labels(&parse(&std::fs::read_to_string(&path).unwrap()).unwrap()),
        b()
    );
    assert_eq!(expiry_of(&path), wall() + EXPIRY_AHEAD);
    assert!(expiry_of(&path) > before);
    assert!(reports.lock().unwrap().is_empty(), "no write failed");

    drop(tx);
    writer.await.unwrap();
    assert!(path.exists(), "the file outlives its writer");
}

#[tokio::test(start_paused = true)]
async fn a_failed_write_is_reported_and_tried_again_until_it_lands() {
    let dir = tempfile::tempdir().unwrap();
    let features = dir.path().join("features.d");
    // Not a folder yet: every write fails.
    std::fs::write(&features, "").unwrap();
    let wall = paused_wall();
    let (tx, rx) = watch::channel(Some(a()));
    let reports = Arc::new(Mutex::new(Vec::new()));
    let seen = reports.clone();
    let writer = tokio::spawn(keep(
        rx,
        FeatureFile::new(&features),
        wall.clone(),
        move |r| seen.lock().unwrap().push(r),
    ));
    settle().await;
    let first = reports.lock().unwrap().clone();
    assert_eq!(first.len(), 1);
    let sentence = first[0].clone().unwrap();
    assert!(
        sentence.starts_with("the node labels could not be written (")
            && sentence.contains("features.d/bcd")
            && sentence.contains("tries again every minute"),
        "{sentence}"
    );
    // The labels change meanwhile; nothing is lost.
    tx.send_replace(Some(b()));
    settle().await;
    std::fs::remove_file(&features).unwrap();
    std::fs::create_dir(&features).unwrap();
    tokio::time::advance(RETRY_AFTER).await;
    settle().await;
    let path = features.join(FILE_NAME);
    assert_eq!(
        as_labels(&parse(&std::fs::read_to_string(&path).unwrap()).unwrap()),
        b()
    );
    assert_eq!(
        reports.lock().unwrap().last(),
        Some(&None),
        "the problem is cleared"
    );
    drop(tx);
    writer.await.unwrap();
}

// A node whose driver lists no GPU any more publishes nothing: the last labels are not
// refreshed, and expire.
#[tokio::test(start_paused = true)]
async fn without_labels_nothing_is_written_and_the_last_ones_expire() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(FILE_NAME);
    let wall = paused_wall();
    let (tx, rx) = watch::channel(Some(a()));
    let writer = tokio::spawn(keep(rx, FeatureFile::new(dir.path()), wall.clone(), |_| {}));
    settle().await;
    let written = std::fs::read(&path).unwrap();
    tx.send_replace(None);
    settle().await;
    for _ in 0..120 {
        tokio::time::advance(Duration::from_secs(60)).await;
        settle().await;
    }
    assert_eq!(std::fs::read(&path).unwrap(), written, "not rewritten");
    let text = String::from_utf8(written).unwrap();
    assert!(unexpired(&text, wall()).unwrap().is_empty(), "expired");
    drop(tx);
    writer.await.unwrap();
}
