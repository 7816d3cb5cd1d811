//! Colour marks a state word and nothing else: `HEALTHY` green, `DEGRADED` yellow,
//! `UNHEALTHY` red, `UNKNOWN` magenta; on a terminal only (`--color auto`), never where
//! `NO_COLOR` is set unless `--color always` asks.

/// `--color`'s choices.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum ColourChoice {
    /// Colour when stdout is a terminal and `NO_COLOR` is unset or empty.
    #[default]
    Auto,
    /// Colour always, even through a pipe or with `NO_COLOR`.
    Always,
    /// No colour.
    Never,
}

/// Whether to colour: `no_color` is `NO_COLOR`'s value where it is set, `terminal` whether
/// stdout is a terminal. `NO_COLOR` counts when it is set and not empty (no-color.org).
pub fn wanted(choice: ColourChoice, no_color: Option<&std::ffi::OsStr>, terminal: bool) -> bool {
    match choice {
        ColourChoice::Always => true,
        ColourChoice::Never => false,
        ColourChoice::Auto => terminal && no_color.is_none_or(std::ffi::OsStr::is_empty),
    }
}

/// [`wanted`] for this process: its `NO_COLOR` and its stdout.
pub fn wanted_here(choice: ColourChoice) -> bool {
    use std::io::IsTerminal;
    wanted(
        choice,
        std::env::var_os("NO_COLOR").as_deref(),
        std::io::stdout().is_terminal(),
    )
}

/// A colour of a state word.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Paint {
    Green,
    Yellow,
    Red,
    Magenta,
}

impl Paint {
    /// The ANSI SGR code of the colour.
    fn sgr(self) -> &'static str {
        match self {
            Self::Green => "32",
            Self::Yellow => "33",
            Self::Red => "1;31",
            Self::Magenta => "35",
        }
    }

    /// `text` in this colour, reset after it.
    pub fn apply(self, text: &str) -> String {
        format!("\x1b[{}m{text}\x1b[0m", self.sgr())
    }
}

/// The colour of a health state's word.
pub fn of_health(state: crate::health::verdict::HealthState) -> Paint {
    use crate::health::verdict::HealthState;
    match state {
        HealthState::Healthy => Paint::Green,
        HealthState::Degraded => Paint::Yellow,
        HealthState::Unhealthy => Paint::Red,
        HealthState::Unknown => Paint::Magenta,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsStr;

    // What broke: nothing marked a GPU's state, and nothing could turn colour off.
    #[test]
    fn colour_only_on_a_terminal_without_no_color_unless_asked() {
        use ColourChoice::{Always, Auto, Never};
        assert!(wanted(Auto, None, true));
        assert!(!wanted(Auto, None, false), "a pipe gets no colour");
        assert!(!wanted(Auto, Some(OsStr::new("1")), true), "NO_COLOR");
        assert!(
            wanted(Auto, Some(OsStr::new("")), true),
            "an empty NO_COLOR is unset"
        );
        assert!(wanted(Always, Some(OsStr::new("1")), false));
        assert!(!wanted(Never, None, true));
    }

    #[test]
    fn a_painted_word_is_reset_after_it() {
        assert_eq!(Paint::Red.apply("UNHEALTHY"), "\x1b[1;31mUNHEALTHY\x1b[0m");
    }
}
