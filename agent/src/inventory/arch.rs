//! The GPU architecture, guessed from the model name where `nvidia-smi` does not say.

/// Model-name fragments of each architecture, newest first, matched against the lower-cased
/// model at a word start. A fragment ending in `*` is a prefix (`rtx 40*` matches `rtx 4090`);
/// any other must end at a word end (`l4` matches `NVIDIA L4`, not `L40S`).
const FAMILIES: &[(&str, &[&str])] = &[
    (
        "blackwell",
        &[
            "blackwell",
            "b100",
            "b200",
            "b300",
            "gb200",
            "gb300",
            "rtx 50*",
            "rtx pro 6000",
        ],
    ),
    (
        "hopper",
        &["hopper", "h100", "h200", "h800", "h20", "gh200"],
    ),
    (
        "ada-lovelace",
        &["ada", "l40s", "l40", "l4", "l20", "rtx 40*"],
    ),
    (
        "ampere",
        &[
            "a100", "a800", "a40", "a30", "a16", "a10g", "a10", "a2", "rtx 30*", "rtx a*",
        ],
    ),
    (
        "turing",
        &[
            "t4",
            "t400",
            "t600",
            "t1000",
            "rtx 20*",
            "gtx 16*",
            "quadro rtx",
            "titan rtx",
        ],
    ),
    ("volta", &["v100*", "titan v", "quadro gv100"]),
    (
        "pascal",
        &[
            "p100",
            "p40",
            "p6",
            "p4",
            "gtx 10*",
            "quadro p*",
            "titan xp",
            "titan x (pascal)",
        ],
    ),
    (
        "maxwell",
        &[
            "m60",
            "m40",
            "m10",
            "m6",
            "gtx 9*",
            "gtx 750*",
            "quadro m*",
            "titan x",
        ],
    ),
    (
        "kepler",
        &[
            "k80",
            "k40*",
            "k20*",
            "k10",
            "k520",
            "grid k*",
            "gt 730",
            "gtx 7*",
            "gtx 6*",
            "quadro k*",
        ],
    ),
];

/// The architecture for a model name (`NVIDIA H100 80GB HBM3` → `hopper`), lower case, or
/// `None` when the name says nothing bcd recognises.
pub fn guess_architecture(model: &str) -> Option<&'static str> {
    let name = model.to_ascii_lowercase();
    FAMILIES
        .iter()
        .find(|(_, fragments)| fragments.iter().any(|f| matches_at_word(&name, f)))
        .map(|(arch, _)| *arch)
}

fn matches_at_word(name: &str, fragment: &str) -> bool {
    let (fragment, prefix) = match fragment.strip_suffix('*') {
        Some(f) => (f, true),
        None => (fragment, false),
    };
    let bytes = name.as_bytes();
    name.match_indices(fragment).any(|(at, _)| {
        let starts_word = at == 0 || !bytes[at - 1].is_ascii_alphanumeric();
        let ends_word = bytes
            .get(at + fragment.len())
            .is_none_or(|c| !c.is_ascii_alphanumeric());
        starts_word && (prefix || ends_word)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn real_model_names_map_to_their_architecture() {
        for (model, arch) in [
            ("NVIDIA H100 80GB HBM3", "hopper"),
            ("NVIDIA H200", "hopper"),
            ("NVIDIA A100-SXM4-80GB", "ampere"),
            ("NVIDIA A10G", "ampere"),
            ("NVIDIA RTX A5000 Laptop GPU", "ampere"),
            ("NVIDIA GeForce RTX 3060 Laptop GPU", "ampere"),
            ("NVIDIA L40S", "ada-lovelace"),
            ("NVIDIA L4", "ada-lovelace"),
            ("NVIDIA RTX 4000 SFF Ada Generation", "ada-lovelace"),
            ("NVIDIA GeForce RTX 4090", "ada-lovelace"),
            ("NVIDIA GeForce RTX 5090", "blackwell"),
            ("NVIDIA B200", "blackwell"),
            ("Tesla T4", "turing"),
            ("GeForce RTX 2080 Ti", "turing"),
            ("NVIDIA GeForce GTX 1650 SUPER", "turing"),
            ("Tesla V100S-PCIE-32GB", "volta"),
            ("Tesla P100-PCIE-16GB", "pascal"),
            ("Quadro P2000", "pascal"),
            ("GeForce GTX 1080", "pascal"),
            ("Tesla K80", "kepler"),
            ("GRID K520", "kepler"),
            ("GeForce GT 730", "kepler"),
        ] {
            assert_eq!(guess_architecture(model), Some(arch), "{model}");
        }
        assert_eq!(guess_architecture("Graphics Device"), None);
    }
}
