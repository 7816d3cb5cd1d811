//! `bcd generate-docs DIR` (hidden): the man pages and the shell completions, made from the
//! one clap definition ([`crate::cli::command`]), so they cannot say what the parser does not
//! take. The packaged copies live in `packaging/man/` and `packaging/completions/`; a test
//! fails when they differ from what this writes.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap_complete::Shell;

use super::output::{code, fail};

/// The shells completions are written for, and each one's file name.
pub const SHELLS: [(Shell, &str); 3] = [
    (Shell::Bash, "bcd.bash"),
    (Shell::Zsh, "_bcd"),
    (Shell::Fish, "bcd.fish"),
];

/// Writes `dir/man/bcd.1` and one page per subcommand (`bcd-status.1`, `bcd-hold-apply.1`,
/// ..., but no `bcd-helper.1`: that name is the root helper's, whose page is section 8), and
/// `dir/completions/` for [`SHELLS`]; returns the files written.
///
/// # Errors
/// The first file that could not be written, named.
pub fn write_docs(dir: &Path) -> Result<Vec<PathBuf>, String> {
    let man = dir.join("man");
    let completions = dir.join("completions");
    for d in [&man, &completions] {
        std::fs::create_dir_all(d).map_err(|e| format!("cannot make {}: {e}", d.display()))?;
    }
    clap_mangen::generate_to(crate::cli::command(), &man)
        .map_err(|e| format!("cannot write the man pages in {}: {e}", man.display()))?;
    // `bcd helper` (one subcommand, `ping`) has no page of its own: bcd-helper is the root
    // helper's name, and its page is bcd-helper(8).
    let _ = std::fs::remove_file(man.join("bcd-helper.1"));
    // bcd.1's list of subcommands names bcd-helper(1) as clap makes it: it names the page that
    // is there, bcd-helper-ping(1), instead.
    let top = man.join("bcd.1");
    let text =
        std::fs::read_to_string(&top).map_err(|e| format!("cannot read {}: {e}", top.display()))?;
    std::fs::write(
        &top,
        text.replace("\nbcd\\-helper(1)\n", "\nbcd\\-helper\\-ping(1)\n"),
    )
    .map_err(|e| format!("cannot write {}: {e}", top.display()))?;
    let mut written: Vec<PathBuf> = std::fs::read_dir(&man)
        .map_err(|e| format!("cannot list {}: {e}", man.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    for (shell, name) in SHELLS {
        let mut text = Vec::new();
        clap_complete::generate(shell, &mut crate::cli::command(), "bcd", &mut text);
        let path = completions.join(name);
        std::fs::write(&path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        written.push(path);
    }
    written.sort();
    Ok(written)
}

/// `bcd generate-docs DIR`: exit 0 having listed what it wrote, 3 when a file could not be
/// written.
pub fn generate(dir: &Path) -> ExitCode {
    match write_docs(dir) {
        Ok(files) => {
            for f in files {
                super::output::print(&format!("{}\n", f.display()));
            }
            ExitCode::SUCCESS
        }
        Err(e) => fail(false, code::INTERNAL, &e),
    }
}
