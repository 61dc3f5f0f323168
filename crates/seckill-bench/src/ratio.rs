//! A ratio a suite reports, against its target: taken between rows of one run.

use std::fmt;

use serde::Serialize;

/// A ratio a suite reports, against its target.
#[derive(Debug, Clone, Serialize)]
pub struct Ratio {
    pub name: String,
    pub value: f64,
    pub target: String,
    pub met: Option<bool>,
    /// What it is the ratio of.
    pub of: String,
}

impl Ratio {
    /// A ratio held against `target` (its text, and whether `value` meets it), or only
    /// reported when there is none.
    pub fn new(name: String, value: f64, target: Option<(&str, bool)>, of: String) -> Self {
        Self {
            name,
            value,
            target: target.map_or("reported".into(), |(text, _)| text.into()),
            met: target.map(|(_, met)| met),
            of,
        }
    }
}

impl fmt::Display for Ratio {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let verdict = match self.met {
            Some(true) => "met",
            Some(false) => "NOT met",
            None => "reported",
        };
        write!(
            f,
            "{}: {:.2} (target {}: {verdict}) = {}",
            self.name, self.value, self.target, self.of
        )
    }
}
