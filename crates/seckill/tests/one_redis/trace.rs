//! The lock timeline (`GET /trace`): written only while the product is traced, an entry and
//! an exit per critical section, on every path a holder leaves by.

use serde_json::{Value, json};

use crate::service;

/// The events of `product`'s timeline, as `(event, holder, outcome)`.
async fn events(api: &seckill_testkit::Api, product: &str) -> Vec<Value> {
    let (status, body) = api.get(&format!("/trace?product={product}")).await;
    assert_eq!(status, 200, "{body}");
    body["events"].as_array().cloned().unwrap_or_default()
}

/// Not traced (the default), a sale writes nothing on the timeline. Traced, each holder of
/// the token, watchdog (both fused scripts and the shared sequence with `fence=on`) and
/// setnx variants enters once and leaves once — sold, or sold out — with its instance,
/// variant and lease; the watchdog's renewals of a short lease are on its exit. A product
/// never reset has an empty timeline, not an error.
#[tokio::test]
async fn a_traced_sale_puts_every_section_on_the_timeline_and_an_untraced_one_nothing() {
    let service = service(1, &[]);
    let api = service.instances[0].api();
    api.reset("101", 2, 1).await;
    assert_eq!(api.deduct("101", "token").await.0, 200);
    assert_eq!(api.deduct("101", "watchdog").await.0, 200);
    assert!(
        events(&api, "101").await.is_empty(),
        "not traced: no events"
    );

    let reset = api
        .reset_with(json!({ "product": "101", "stock": 3, "trace": true }))
        .await;
    assert_eq!(reset["trace"], true, "{reset}");
    for knobs in [
        "token?ttl_ms=5000",
        "watchdog?work_ms=1000&lease_ms=600&renew=on",
        "watchdog?fence=on",
        "setnx",
    ] {
        let (status, body) = api.deduct("101", knobs).await;
        assert!(status == 200 || status == 409, "{knobs}: {status} {body}");
    }
    let events = events(&api, "101").await;
    assert_eq!(events.len(), 8, "an entry and an exit each: {events:#?}");
    for pair in events.chunks(2) {
        let (enter, leave) = (&pair[0], &pair[1]);
        assert_eq!(enter["event"], "enter", "{pair:#?}");
        assert_eq!(leave["event"], "leave", "{pair:#?}");
        assert_eq!(enter["holder"], leave["holder"]);
        assert_eq!(enter["overlap"], false);
        assert!(
            enter["instance"].is_string() && enter["variant"].is_string(),
            "{enter}"
        );
        assert!(leave["at"].as_u64() >= enter["at"].as_u64());
    }
    let outcomes: Vec<&str> = events
        .iter()
        .filter_map(|e| e["outcome"].as_str())
        .collect();
    assert_eq!(outcomes, ["deducted", "deducted", "deducted", "sold_out"]);
    let variants: Vec<&str> = events
        .iter()
        .filter_map(|e| e["variant"].as_str())
        .collect();
    assert_eq!(variants, ["token", "watchdog", "watchdog", "setnx"]);
    assert_eq!(events[0]["lease_ms"], 5000, "the token lock's TTL");
    assert!(
        events[6].get("lease_ms").is_none(),
        "setnx's lock has no lease"
    );
    let renewals = events[3]["renewals_ms"].as_array().map_or(0, Vec::len);
    // Five renewals expected; two even if each came twice as late (a later one than that
    // and the lease would have run out: lock_lost).
    assert!(
        renewals >= 2,
        "1 s of work on a 600 ms lease renewed every 200 ms: {:#}",
        events[3]
    );

    let (status, body) = api.get("/trace?product=never-reset").await;
    assert_eq!((status, body["events"].clone()), (200, json!([])), "{body}");
    let (status, body) = api.get("/trace?product=101&since=soon").await;
    assert_eq!(status, 400, "{body}");
}
