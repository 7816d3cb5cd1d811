//! The host bcd looks at: the root under which `/proc`, `/sys` and `/dev` are read, the
//! `nvidia-smi` to run, and the `systemctl` asked whether `nvidia-fabricmanager` runs.
//! Production uses `/` and both from `PATH`; tests and demos point them at a fake host
//! (`testdata/hosts/<name>/{root,bin/nvidia-smi,bin/systemctl}`; a host without
//! `bin/systemctl` has no systemd to ask).

use std::path::{Path, PathBuf};

/// Where to read the host from. Cheap to clone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Host {
    root: PathBuf,
    nvidia_smi: PathBuf,
    systemctl: PathBuf,
}

impl Default for Host {
    fn default() -> Self {
        Self::new("/", "nvidia-smi")
    }
}

impl Host {
    /// A host rooted at `root`, running `nvidia_smi` (a bare name is looked up on `PATH`).
    pub fn new(root: impl Into<PathBuf>, nvidia_smi: impl Into<PathBuf>) -> Self {
        Self {
            root: root.into(),
            nvidia_smi: nvidia_smi.into(),
            systemctl: PathBuf::from("systemctl"),
        }
    }

    /// A fake host folder: `DIR/root` is the root and `DIR/bin/nvidia-smi` the `nvidia-smi`.
    pub fn fake(dir: impl AsRef<Path>) -> Self {
        let dir = dir.as_ref();
        let mut host = Self::new(dir.join("root"), dir.join("bin/nvidia-smi"));
        host.systemctl = dir.join("bin/systemctl");
        host
    }

    /// The same host asking `systemctl` about units.
    pub fn with_systemctl(mut self, systemctl: impl Into<PathBuf>) -> Self {
        self.systemctl = systemctl.into();
        self
    }

    /// The `systemctl` to ask about units, as given.
    pub(crate) fn systemctl(&self) -> &Path {
        &self.systemctl
    }

    /// The `nvidia-smi` to run, as given.
    pub fn nvidia_smi(&self) -> &Path {
        &self.nvidia_smi
    }

    /// A path of the host, such as `/proc/driver/nvidia/version`, under the root.
    pub fn path(&self, absolute: impl AsRef<Path>) -> PathBuf {
        let relative = absolute
            .as_ref()
            .strip_prefix("/")
            .unwrap_or(absolute.as_ref());
        self.root.join(relative)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_paths_stay_under_the_root() {
        let host = Host::fake("/tmp/h");
        assert_eq!(
            host.path("/proc/modules"),
            PathBuf::from("/tmp/h/root/proc/modules")
        );
        assert_eq!(host.nvidia_smi(), Path::new("/tmp/h/bin/nvidia-smi"));
        assert_eq!(Host::default().path("/sys"), PathBuf::from("/sys"));
    }
}
