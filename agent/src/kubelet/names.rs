//! Kubernetes' object names, as the API server validates them: a namespace and a container
//! name are DNS-1123 labels, a pod's name a DNS-1123 subdomain. The kubelet's PodResources
//! answers only names the API server accepted, so a name that fails these rules comes from a
//! broken or hostile peer and is not kept (its 1 MiB names once made a 135 MB `/metrics`).

/// The longest DNS-1123 label (a namespace, a container).
pub const MAX_LABEL: usize = 63;
/// The longest DNS-1123 subdomain (a pod).
pub const MAX_SUBDOMAIN: usize = 253;

/// Whether `name` is a DNS-1123 label: at most 63 of `a-z`, `0-9` and `-`, starting and
/// ending with a letter or digit.
pub fn is_label(name: &str) -> bool {
    let b = name.as_bytes();
    let edge = |c: u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    !b.is_empty()
        && b.len() <= MAX_LABEL
        && edge(b[0])
        && edge(b[b.len() - 1])
        && b.iter().all(|&c| edge(c) || c == b'-')
}

/// Whether `name` is a DNS-1123 subdomain: at most 253 characters, DNS-1123 labels joined by
/// dots.
pub fn is_subdomain(name: &str) -> bool {
    name.len() <= MAX_SUBDOMAIN && name.split('.').all(is_label)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_and_subdomains_follow_the_api_servers_rules() {
        for good in ["a", "default", "kube-system", "x0", &"a".repeat(63)] {
            assert!(is_label(good), "{good}");
        }
        for bad in ["", "-a", "a-", "A", "a_b", "a.b", "é", &"a".repeat(64)] {
            assert!(!is_label(bad), "{bad}");
        }
        for good in [
            "trainer-0",
            "a.b-c.d",
            &format!("{}.{}", "a".repeat(63), "b".repeat(63)),
        ] {
            assert!(is_subdomain(good), "{good}");
        }
        let long = vec!["a".repeat(63); 4].join(".");
        assert_eq!(long.len(), 255);
        for bad in ["", ".a", "a.", "a..b", "Pod", "x\"} 1\nbcd_gpus 99", &long] {
            assert!(!is_subdomain(bad), "{bad}");
        }
    }
}
