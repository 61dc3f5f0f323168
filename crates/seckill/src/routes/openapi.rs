//! `GET /openapi.json`: the API's description, which `scripts/fuzz-api.sh` fuzzes from.
//!
//! `openapi.json` (beside `src/`) is written by hand for everything but what the code
//! declares: the variants, their knobs with this instance's bounds, the outcomes and the
//! lessons are filled in from the registries here, so a new variant or knob is described
//! the moment it exists.

use axum::extract::State;
use axum::http::header::CONTENT_TYPE;
use axum::response::IntoResponse;
use serde_json::{Value, json};

use crate::config::Limits;
use crate::knobs::{Kind, Knob};
use crate::lessons::LESSONS;
use crate::state::AppState;
use crate::variants::{Outcome, VARIANTS};

const TEMPLATE: &str = include_str!("../../openapi.json");

pub(super) async fn openapi(State(state): State<AppState>) -> impl IntoResponse {
    (
        [(CONTENT_TYPE, "application/json")],
        document(&state.settings.limits).to_string(),
    )
}

/// The description, with what the code declares filled in.
pub fn document(limits: &Limits) -> Value {
    let mut doc: Value = serde_json::from_str(TEMPLATE).expect("openapi.json is JSON");
    let knobs = every_knob();
    let refs: Vec<Value> = crate::knobs::ALWAYS
        .into_iter()
        .chain(knobs.iter().map(|k| k.name))
        .chain([crate::idempotency::PARAMETER])
        .map(|name| json!({ "$ref": format!("#/components/parameters/{name}") }))
        .collect();

    let names: Vec<&str> = VARIANTS.iter().map(|v| v.name()).collect();
    let named = &mut doc["paths"]["/deduct_stock/{variant}"]["parameters"];
    let mut variant = named[0].take();
    variant["schema"]["enum"] = json!(names);
    *named = Value::Array(std::iter::once(variant).chain(refs.clone()).collect());
    doc["paths"]["/deduct_stock"]["parameters"] = Value::Array(refs);

    let parameters = &mut doc["components"]["parameters"];
    for knob in &knobs {
        parameters[knob.name] = parameter(knob, limits);
    }
    doc["components"]["schemas"]["Answer"]["properties"]["outcome"]["enum"] = json!(Outcome::NAMES);
    let lessons: Vec<&str> = LESSONS.iter().map(|l| l.name).collect();
    doc["paths"]["/admin/lesson"]["post"]["requestBody"]["content"]["application/json"]["schema"]
        ["properties"]["lesson"]["enum"] = json!(lessons);
    doc
}

/// Every knob some variant takes, once, in the registry's order.
fn every_knob() -> Vec<&'static Knob> {
    let mut knobs: Vec<&'static Knob> = Vec::new();
    for knob in VARIANTS.iter().flat_map(|v| v.spec().knobs) {
        if !knobs.iter().any(|k| k.name == knob.name) {
            knobs.push(knob);
        }
    }
    knobs
}

/// A knob as a query parameter, bounded as this instance bounds it.
fn parameter(knob: &Knob, limits: &Limits) -> Value {
    let schema = match knob.kind {
        Kind::Millis { min, max, .. } => {
            json!({ "type": "integer", "minimum": min, "maximum": max(limits) })
        }
        Kind::Switch { .. } => json!({ "type": "string", "enum": ["on", "off"] }),
        Kind::Count { min, max } => json!({ "type": "integer", "minimum": min, "maximum": max }),
        Kind::Choice { values } => json!({ "type": "string", "enum": values }),
        Kind::Products { max } => json!({
            "type": "string",
            "pattern": format!(
                "^[A-Za-z0-9_-]{{1,{len}}}(,[A-Za-z0-9_-]{{1,{len}}}){{0,{}}}$",
                max - 1,
                len = crate::keys::ProductId::MAX_LEN
            ),
        }),
    };
    json!({
        "name": knob.name,
        "in": "query",
        "description": knob.doc,
        "schema": schema,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct LimitsOnly {
        #[command(flatten)]
        limits: Limits,
    }

    #[test]
    fn every_variant_and_knob_is_described() {
        let limits = LimitsOnly::parse_from(["x", "--max-work-ms", "1234"]).limits;
        let doc = document(&limits);
        let variants = &doc["paths"]["/deduct_stock/{variant}"]["parameters"][0]["schema"]["enum"];
        for variant in VARIANTS {
            assert!(
                variants
                    .as_array()
                    .unwrap()
                    .contains(&json!(variant.name())),
                "{variant}"
            );
            for knob in variant.spec().knobs {
                let described = &doc["components"]["parameters"][knob.name];
                assert_eq!(described["name"], knob.name);
            }
        }
        let work = &doc["components"]["parameters"]["work_ms"]["schema"];
        assert_eq!(work["maximum"], 1234);
    }
}
