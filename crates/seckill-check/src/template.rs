//! A target file's templates: text with placeholders (`{product}`, `{user}`, …) filled in
//! for each request. A brace not followed by a name and a closing brace is text, so a JSON
//! body (`{"product":"{product}"}`) needs no escaping.

use std::fmt::Write;

/// The placeholders a template may hold, filled per request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Slot {
    Product,
    Stock,
    Limit,
    User,
    Key,
    Order,
    Variant,
}

impl Slot {
    const ALL: [Slot; 7] = [
        Slot::Product,
        Slot::Stock,
        Slot::Limit,
        Slot::User,
        Slot::Key,
        Slot::Order,
        Slot::Variant,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Slot::Product => "product",
            Slot::Stock => "stock",
            Slot::Limit => "limit",
            Slot::User => "user",
            Slot::Key => "key",
            Slot::Order => "order",
            Slot::Variant => "variant",
        }
    }
}

/// A template split into text and the slots between it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    parts: Vec<Part>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Text(String),
    Slot(Slot),
}

impl Template {
    /// `text` read as a template whose placeholders must be among `allowed`; the error
    /// names the placeholder and the ones `field` knows.
    pub fn parse(field: &str, text: &str, allowed: &[Slot]) -> Result<Self, String> {
        let mut parts = Vec::new();
        let mut rest = text;
        while let Some(open) = rest.find('{') {
            let after = &rest[open + 1..];
            let name_len = after
                .bytes()
                .take_while(|b| b.is_ascii_lowercase() || *b == b'_')
                .count();
            if name_len == 0 || !after[name_len..].starts_with('}') {
                push_text(&mut parts, &rest[..=open]);
                rest = after;
                continue;
            }
            let name = &after[..name_len];
            let known = |s: &&Slot| s.name() == name;
            let Some(slot) = allowed.iter().find(known) else {
                let mut names = String::new();
                for slot in allowed {
                    let _ = write!(names, " {{{}}}", slot.name());
                }
                let what = if Slot::ALL.iter().any(|s| known(&s)) {
                    "is not filled in here"
                } else {
                    "is not a placeholder"
                };
                return Err(format!(
                    "{field}: {{{name}}} {what} (this field knows{names})"
                ));
            };
            push_text(&mut parts, &rest[..open]);
            parts.push(Part::Slot(*slot));
            rest = &after[name_len + 1..];
        }
        push_text(&mut parts, rest);
        Ok(Self { parts })
    }

    /// The template of no text.
    pub fn empty() -> Self {
        Self { parts: Vec::new() }
    }

    /// The text with each slot replaced by what `value` gives for it.
    pub fn fill(&self, value: impl Fn(Slot) -> String) -> String {
        let mut out = String::new();
        for part in &self.parts {
            match part {
                Part::Text(text) => out.push_str(text),
                Part::Slot(slot) => out.push_str(&value(*slot)),
            }
        }
        out
    }

    /// Whether the template holds `slot`.
    pub fn holds(&self, slot: Slot) -> bool {
        self.parts.contains(&Part::Slot(slot))
    }
}

fn push_text(parts: &mut Vec<Part>, text: &str) {
    if text.is_empty() {
        return;
    }
    match parts.last_mut() {
        Some(Part::Text(last)) => last.push_str(text),
        _ => parts.push(Part::Text(text.to_owned())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fills_slots_and_leaves_json_braces_alone() {
        let body = r#"{"product":"{product}","stock":{stock}}"#;
        let t = Template::parse("reset.body", body, &[Slot::Product, Slot::Stock]).unwrap();
        let filled = t.fill(|slot| match slot {
            Slot::Product => "101".into(),
            _ => "7".into(),
        });
        assert_eq!(filled, r#"{"product":"101","stock":7}"#);
        assert!(t.holds(Slot::Stock) && !t.holds(Slot::User));
    }

    #[test]
    fn a_placeholder_the_field_does_not_fill_is_an_error_naming_the_field() {
        let err = Template::parse("reset.path", "/r/{user}", &[Slot::Product]).unwrap_err();
        assert_eq!(
            err,
            "reset.path: {user} is not filled in here (this field knows {product})"
        );
        let err = Template::parse("buy.path", "/b/{usr}", &[Slot::User]).unwrap_err();
        assert!(
            err.starts_with("buy.path: {usr} is not a placeholder"),
            "{err}"
        );
    }
}
