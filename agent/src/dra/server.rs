//! Which of the slices' newer fields the API server keeps: first from its version
//! (`GET /version`), then from the objects it returns. A field behind a feature gate that is
//! off is dropped silently by the server on a write; [`super::slices::dropped`] sees that in
//! the answer, and [`Features::without`] stops using it for the rest of the run. The
//! controller asks first with a dry run of [`super::slices::probe`] (nothing is stored), so
//! the first real write already leaves out what the server would drop; a server that does
//! not answer the dry run gets no newer field for the run. Every real write's answer is read
//! the same way after.
//!
//! | feature | tried on | gate | without it |
//! | --- | --- | --- | --- |
//! | device taints | every server (alpha in 1.34 and 1.35, beta from 1.36) | `DRADeviceTaints` | a device not offered is left out of the slice |
//! | shared devices (consumable capacity) | Kubernetes 1.36 and later | `DRAConsumableCapacity` | a GPU's slots are slot devices |
//!
//! Taints have kept their shape since their alpha, and the dry run costs nothing visible, so
//! a cluster that turned the alpha gate on gets them. Consumable capacity is tried from 1.36
//! only: its alpha (1.34, 1.35) is not the API bcd was written against.

use super::devices::Features;
use super::slices::Dropped;

/// A server's Kubernetes version, as `GET /version` gives it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct ServerVersion {
    /// `1`.
    pub major: u32,
    /// `36` (a trailing `+`, as some distributions write it, is ignored).
    pub minor: u32,
}

impl ServerVersion {
    /// The version from `/version`'s `major` and `minor`; `None` when either is not a number.
    pub fn parse(major: &str, minor: &str) -> Option<Self> {
        let number = |s: &str| s.trim().trim_end_matches('+').parse::<u32>().ok();
        Some(Self {
            major: number(major)?,
            minor: number(minor)?,
        })
    }

    /// Whether it is `major.minor` or later.
    pub fn at_least(self, major: u32, minor: u32) -> bool {
        self >= Self { major, minor }
    }
}

impl std::fmt::Display for ServerVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

/// The first server version bcd tries shared devices (consumable capacity) on.
pub const SHARES_FROM: (u32, u32) = (1, 36);

impl Features {
    /// What to try on a server of `version` (`None`: it did not say; taken as the oldest
    /// supported, 1.34), for a node with `slots` slots a GPU: taints everywhere, shared devices
    /// from [`SHARES_FROM`]. The dry run and the writes' answers then take off what the
    /// server drops.
    pub fn for_server(version: Option<ServerVersion>, slots: u32) -> Self {
        let newer = version.is_some_and(|v| v.at_least(SHARES_FROM.0, SHARES_FROM.1));
        Self {
            taints: true,
            shares: newer && slots > 0,
        }
    }

    /// These features less what the server `dropped`.
    #[must_use]
    pub fn without(self, dropped: Dropped) -> Self {
        Self {
            taints: self.taints && !dropped.taints,
            shares: self.shares && !dropped.shares,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_read_as_servers_write_them() {
        assert_eq!(
            ServerVersion::parse("1", "36"),
            Some(ServerVersion {
                major: 1,
                minor: 36
            })
        );
        assert_eq!(
            ServerVersion::parse("1", "34+"),
            Some(ServerVersion {
                major: 1,
                minor: 34
            })
        );
        assert_eq!(ServerVersion::parse("1", ""), None);
        assert_eq!(ServerVersion::parse("one", "34"), None);
        assert!(ServerVersion::parse("2", "0").unwrap().at_least(1, 36));
        assert!(!ServerVersion::parse("1", "35").unwrap().at_least(1, 36));
    }

    #[test]
    fn taints_are_tried_everywhere_shares_from_1_36_and_both_given_up_when_dropped() {
        let v = |minor| ServerVersion::parse("1", minor);
        // (version, slots) → (taints, shares)
        for (version, slots, want) in [
            (v("34"), 2, (true, false)),
            (v("35"), 2, (true, false)),
            (v("36"), 0, (true, false)),
            (v("36"), 2, (true, true)),
            (v("37+"), 4, (true, true)),
            (None, 2, (true, false)),
        ] {
            let f = Features::for_server(version, slots);
            assert_eq!((f.taints, f.shares), want, "{version:?} {slots}");
        }
        let both = Features::for_server(v("36"), 2);
        let no_taints = both.without(Dropped {
            taints: true,
            shares: false,
        });
        assert_eq!((no_taints.taints, no_taints.shares), (false, true));
        assert_eq!(
            no_taints.without(Dropped {
                taints: false,
                shares: true
            }),
            Features::default()
        );
        assert_eq!(both.without(Dropped::default()), both);
    }
}
