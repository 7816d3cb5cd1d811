//! The Prometheus text exposition format (version 0.0.4), written: each family's `# HELP` and
//! `# TYPE` lines once, before its samples; samples with their labels; label values and help
//! text escaped as the format says. It is bcd's one writer of the format: the node's metrics
//! ([`crate::node::metrics`]) and the kubelet side's counters ([`crate::kubelet::KubeState`])
//! both write through it, so no VM, pod or resource name can end a label value or a line.
//!
//! It imports nothing of bcd: it sits below `node/` and `kubelet/`, which both use it and
//! neither of which may import the other.

use std::fmt::Write;

/// A family's type, the word of its `# TYPE` line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Only goes up (and back to zero when its source starts again).
    Counter,
    /// Goes up and down.
    Gauge,
}

impl Kind {
    /// `counter` or `gauge`.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
        }
    }
}

/// A text exposition being written, family after family.
#[derive(Debug, Default)]
pub struct Exposition {
    text: String,
}

impl Exposition {
    /// A new family whose `# HELP` and `# TYPE` lines are written with its first sample: a
    /// family that gets no sample leaves no line.
    pub fn family<'e>(&'e mut self, name: &'e str, kind: Kind, help: &'e str) -> Family<'e> {
        Family {
            text: &mut self.text,
            name,
            kind,
            help,
            started: false,
        }
    }

    /// A new family whose `# HELP` and `# TYPE` lines are written now, with or without
    /// samples: for a counter whose rate an alert takes from the first scrape on.
    pub fn family_always<'e>(&'e mut self, name: &'e str, kind: Kind, help: &'e str) -> Family<'e> {
        let mut family = self.family(name, kind, help);
        family.start();
        family
    }

    /// The text written so far.
    pub fn into_text(self) -> String {
        self.text
    }
}

/// One family being written: every sample goes under its name, after its one `# HELP` and
/// `# TYPE`.
#[derive(Debug)]
pub struct Family<'e> {
    text: &'e mut String,
    name: &'e str,
    kind: Kind,
    help: &'e str,
    started: bool,
}

impl Family<'_> {
    fn start(&mut self) {
        if std::mem::replace(&mut self.started, true) {
            return;
        }
        self.text.push_str("# HELP ");
        self.text.push_str(self.name);
        self.text.push(' ');
        escape_into(self.text, self.help, Escape::Help);
        let _ = writeln!(self.text, "\n# TYPE {} {}", self.name, self.kind.name());
    }

    /// Writes one sample: `name{label="value",...} number`, the labels in the order given
    /// (no braces without labels), each value escaped.
    pub fn sample<'l>(&mut self, labels: impl IntoIterator<Item = (&'l str, &'l str)>, value: f64) {
        self.start();
        self.text.push_str(self.name);
        let mut first = true;
        for (name, label_value) in labels {
            self.text.push(if first { '{' } else { ',' });
            first = false;
            self.text.push_str(name);
            self.text.push_str("=\"");
            escape_into(self.text, label_value, Escape::LabelValue);
            self.text.push('"');
        }
        if !first {
            self.text.push('}');
        }
        self.text.push(' ');
        write_number(self.text, value);
        self.text.push('\n');
    }
}

/// Where a text goes, which decides what is escaped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Escape {
    /// A `# HELP` line's text: backslash and line feed.
    Help,
    /// A quoted label value: backslash, line feed and double quote, the only three characters
    /// the format gives a meaning there.
    LabelValue,
}

fn escape_into(out: &mut String, text: &str, context: Escape) {
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '"' if context == Escape::LabelValue => out.push_str("\\\""),
            c => out.push(c),
        }
    }
}

/// A sample's value: a whole number without a fraction (`85520809984`, not `8.55e10`), else
/// the shortest decimal that reads back as the same `f64`; `NaN`, `+Inf` and `-Inf` as the
/// format spells them.
fn write_number(out: &mut String, v: f64) {
    if v.is_nan() {
        out.push_str("NaN");
    } else if v.is_infinite() {
        out.push_str(if v > 0.0 { "+Inf" } else { "-Inf" });
    } else if v.fract() == 0.0 && v.abs() < 1e15 {
        let _ = write!(out, "{}", v as i64);
    } else {
        let _ = write!(out, "{v}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one_sample(labels: &[(&str, &str)], value: f64) -> String {
        let mut text = Exposition::default();
        text.family("x", Kind::Gauge, "h")
            .sample(labels.iter().copied(), value);
        text.into_text()
    }

    #[test]
    fn a_family_has_one_help_and_type_before_its_samples() {
        let mut text = Exposition::default();
        let mut f = text.family("bcd_a_total", Kind::Counter, "As.");
        f.sample([("uuid", "GPU-1")], 1.0);
        f.sample([("uuid", "GPU-2"), ("type", "x")], 2.0);
        text.family("bcd_b", Kind::Gauge, "Bs.").sample([], 0.5);
        assert_eq!(
            text.into_text(),
            "# HELP bcd_a_total As.\n# TYPE bcd_a_total counter\n\
             bcd_a_total{uuid=\"GPU-1\"} 1\nbcd_a_total{uuid=\"GPU-2\",type=\"x\"} 2\n\
             # HELP bcd_b Bs.\n# TYPE bcd_b gauge\nbcd_b 0.5\n"
        );
    }

    #[test]
    fn a_family_without_samples_is_left_out_unless_it_is_always_there() {
        let mut text = Exposition::default();
        text.family("bcd_none", Kind::Gauge, "Never.");
        text.family_always("bcd_xid_total", Kind::Counter, "XIDs.");
        assert_eq!(
            text.into_text(),
            "# HELP bcd_xid_total XIDs.\n# TYPE bcd_xid_total counter\n"
        );
    }

    #[test]
    fn label_values_escape_backslash_quote_and_newline_and_nothing_else() {
        assert_eq!(
            one_sample(&[("pod", "a\"b\\c\nd"), ("n", "plain-é")], 1.0),
            "# HELP x h\n# TYPE x gauge\nx{pod=\"a\\\"b\\\\c\\nd\",n=\"plain-é\"} 1\n"
        );
    }

    // A VM or pod name is not bcd's to restrict: a hostile one must stay inside its quoted
    // label value (no early close, no new line, no injected label or sample).
    #[test]
    fn a_hostile_label_value_stays_inside_its_quotes() {
        let text = one_sample(&[("pod", "x\"} 1\nbcd_gpus 99\n# \\")], 58.0);
        assert_eq!(text.lines().count(), 3, "{text}");
        assert!(
            text.ends_with("x{pod=\"x\\\"} 1\\nbcd_gpus 99\\n# \\\\\"} 58\n"),
            "{text}"
        );
    }

    #[test]
    fn help_escapes_backslash_and_newline_but_keeps_quotes() {
        let mut text = Exposition::default();
        text.family_always("x", Kind::Gauge, "a \"b\" c\\d\ne");
        assert_eq!(
            text.into_text(),
            "# HELP x a \"b\" c\\\\d\\ne\n# TYPE x gauge\n"
        );
    }

    #[test]
    fn numbers_are_whole_when_they_can_be_and_non_finite_ones_as_the_format_spells_them() {
        let value = |v| one_sample(&[], v).lines().last().unwrap().to_owned();
        assert_eq!(value(85_520_809_984.0), "x 85520809984");
        assert_eq!(value(0.97), "x 0.97");
        assert_eq!(value(-3.0), "x -3");
        assert_eq!(value(1e15), "x 1000000000000000");
        assert_eq!(value(f64::NAN), "x NaN");
        assert_eq!(value(f64::INFINITY), "x +Inf");
        assert_eq!(value(f64::NEG_INFINITY), "x -Inf");
    }
}
