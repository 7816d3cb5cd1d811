//! The subcommands: what each does and prints. Each returns the process's exit status; all
//! output goes through [`output`]. The domain modules (inventory, health, doctor, cdi, ...)
//! know nothing of the command line: a subcommand passes them the few values they need.

pub mod cdi;
pub mod diag;
pub mod docs;
pub mod doctor;
pub mod hardware;
pub mod helper;
pub mod labels;
pub mod mig;
pub mod output;
pub mod remediations;
pub mod service;
pub mod status;

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                sources(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }

    // What broke: `health` and `doctor` imported the CLI's `Global`, so they could only be
    // driven as subcommands and their output lived outside `commands`.
    #[test]
    fn no_domain_module_imports_the_command_line() {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut files = Vec::new();
        sources(&src, &mut files);
        let offenders: Vec<String> = files
            .iter()
            .filter(|f| {
                let rel = f.strip_prefix(&src).unwrap();
                !(rel.starts_with("commands")
                    || rel == Path::new("commands.rs")
                    || rel == Path::new("cli.rs")
                    || rel == Path::new("main.rs"))
            })
            .filter(|f| {
                let text = std::fs::read_to_string(f).unwrap();
                text.contains("crate::cli") || text.contains("bcd::cli")
            })
            .map(|f| f.strip_prefix(&src).unwrap().display().to_string())
            .collect();
        assert!(offenders.is_empty(), "{offenders:?}");
    }
}
