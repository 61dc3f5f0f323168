//! A target file's checks, read straight from text (no request is sent): load goes to
//! loopback only unless the file names the host, plain HTTP only, no credentials in the
//! URL, and the variants' rows in the file's order.

use seckill_check::target::Target;
use seckill_testkit::root;

/// The example file with its `base` line replaced by `base` (and `more` lines added).
fn with_base(base: &str, more: &str) -> Result<Target, String> {
    let good = std::fs::read_to_string(root().join("check/example/stock.toml")).unwrap();
    let line = "base = \"http://127.0.0.1:9090\"";
    assert!(good.contains(line));
    Target::parse(&good.replacen(line, &format!("base = \"{base}\"\n{more}"), 1))
}

#[test]
fn loopback_addresses_are_taken_as_they_are() {
    for base in [
        "http://127.0.0.1:9090",
        "http://127.8.9.10:80",
        "http://localhost:9090",
        "http://[::1]:9090",
    ] {
        assert!(
            with_base(base, "").is_ok(),
            "{base}: {:?}",
            with_base(base, "")
        );
    }
}

#[test]
fn any_other_host_needs_naming_and_gets_exactly_that_name() {
    for (base, host) in [
        ("http://192.0.2.7:9090", "192.0.2.7"),
        ("http://0.0.0.0:9090", "0.0.0.0"),
        ("http://shop.example:8080", "shop.example"),
        ("http://[::ffff:127.0.0.1]:9090", "[::ffff:7f00:1]"),
    ] {
        let err = with_base(base, "").unwrap_err();
        assert!(
            err.contains("is not a loopback address")
                && err.contains(&format!("allow_host = \"{host}\"")),
            "{base}: {err}"
        );
        let named = with_base(base, &format!("allow_host = \"{host}\""));
        assert!(named.is_ok(), "{base} named: {named:?}");
        let other = with_base(base, "allow_host = \"elsewhere.example\"");
        assert!(other.is_err(), "{base}: another name is not this one");
    }
}

#[test]
fn a_url_with_credentials_or_tls_or_a_path_is_refused() {
    for (base, says) in [
        (
            "http://127.0.0.1@shop.example:80",
            "holds a user or password",
        ),
        ("http://user:pw@127.0.0.1:9090", "holds a user or password"),
        ("https://127.0.0.1:9090", "is not an http:// URL"),
        (
            "http://127.0.0.1:9090/api",
            "give the scheme, host and port only",
        ),
    ] {
        let err = with_base(base, "").unwrap_err();
        assert!(err.contains(says), "{base}: {err}");
    }
}

#[test]
fn variants_run_in_the_files_order() {
    let text = std::fs::read_to_string(root().join("check/seckill.toml")).unwrap();
    let target = Target::parse(&text).unwrap();
    let names: Vec<&str> = target.variants.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        ["naive", "setnx", "token_past_ttl", "watchdog", "lua"]
    );
}

#[test]
fn a_server_error_cannot_be_read_as_nothing_sold() {
    // A 502 or 504 from a proxy whose upstream timed out may have sold: unknown, never
    // sold out, refused or busy. `sold` may still name one (a sale is never hidden).
    let good = std::fs::read_to_string(root().join("check/example/stock.toml")).unwrap();
    let line = "busy = []";
    assert!(good.contains(line));
    for (list, says) in [
        ("busy = [503]", "buy.busy: 503 is a server error"),
        ("busy = [429, 504]", "buy.busy: 504 is a server error"),
    ] {
        let err = Target::parse(&good.replacen(line, list, 1)).unwrap_err();
        assert!(err.contains(says), "{list}: {err}");
    }
    assert!(Target::parse(&good.replacen(line, "busy = [429]", 1)).is_ok());
}

#[test]
fn a_rows_phases_are_bounded_in_all_not_only_each() {
    // Three phases of a million requests each: each within its bound, the row's history
    // past the file's.
    let good = std::fs::read_to_string(root().join("check/example/stock.toml")).unwrap();
    let phase =
        "\n[[phases]]\nname = \"more\"\nbuyers = 10\nrequests = 1000000\nconcurrency = 10\n";
    let err = Target::parse(&format!("{good}{}", phase.repeat(3))).unwrap_err();
    assert!(err.contains("phases' requests in all"), "{err}");
    assert!(Target::parse(&format!("{good}{phase}")).is_ok());
}
