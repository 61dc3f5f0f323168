//! `deduct.lua`, the lock-free variant's script, called directly: a call sent twice sells
//! once, one call sells several products a line each, a line that fails fails alone (before
//! it writes, when its stock is not a whole number or a deduction's check fails; with its
//! sales whole, when a write after its orders fails), the
//! buyer's limit is read from the audit or, for an older reset, the meta, and a voided
//! order id is refused (the void marked in the audit, whoever voided it).

use redis::AsyncCommands;
use seckill::scripts::{self, Refusal, Reply};
use seckill_testkit::RedisServer;

use crate::keys;

/// `deduct.lua` (the lock-free variant) sent twice with the same order ids — a client
/// library re-sending a call after a dropped connection — sells once: the second call
/// answers those deductions sold, and takes nothing more. A voided order id never sells.
#[tokio::test]
async fn the_lock_free_script_sent_twice_sells_once() {
    let redis = RedisServer::start();
    let mut conn = redis.conn().await;
    let shard = keys("101").whole();
    let _: () = conn.set(&shard.stock, 10).await.unwrap();
    let call = |orders: &[&'static str]| {
        let sales = orders.iter().map(|&order| scripts::Deduct {
            order,
            user: "",
            holder: "h",
            key: "",
        });
        scripts::deduct("test", "lua", [(&*shard, sales)])
    };
    let sold = Reply::Units(1);
    let first: Vec<Vec<Reply>> = call(&["o-1", "o-2"]).invoke_async(&mut conn).await.unwrap();
    assert_eq!(first, [[Reply::Units(10), sold, sold]]);
    let again: Vec<Vec<Reply>> = call(&["o-1", "o-2", "o-3"])
        .invoke_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(
        again,
        [[Reply::Units(8), sold, sold, sold]],
        "o-1 and o-2 sold before, o-3 now"
    );
    // o-4's answer was lost and the look-up found it had not run: voided.
    let (sold, _): (i64, Option<i64>) = scripts::resolve(&shard, "h", "o-4")
        .invoke_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(sold, 0, "o-4 never ran");
    let voided: Vec<Vec<Reply>> = call(&["o-4"]).invoke_async(&mut conn).await.unwrap();
    assert_eq!(voided, [[Reply::Units(7), Reply::Refused(Refusal::Voided)]]);
    let stock: i64 = conn.get(&shard.stock).await.unwrap();
    let orders: i64 = conn.hlen(&shard.orders).await.unwrap();
    assert_eq!((stock, orders), (7, 3));

    // A lone deduction (a line of one, the most of a sale spread over many products) sent
    // twice sells once too; sent again once the stock is gone, it is still answered sold,
    // not sold out.
    let sold = Reply::Units(1);
    let lone: Vec<Vec<Reply>> = call(&["o-5"]).invoke_async(&mut conn).await.unwrap();
    assert_eq!(lone, [[Reply::Units(7), sold]]);
    let again: Vec<Vec<Reply>> = call(&["o-5"]).invoke_async(&mut conn).await.unwrap();
    assert_eq!(again, [[Reply::Units(6), sold]], "o-5 sold before");
    let stock: i64 = conn.get(&shard.stock).await.unwrap();
    assert_eq!(stock, 6);
    let _: () = conn.set(&shard.stock, 0).await.unwrap();
    let late: Vec<Vec<Reply>> = call(&["o-5"]).invoke_async(&mut conn).await.unwrap();
    assert_eq!(
        late,
        [[Reply::Units(0), sold]],
        "o-5 sold before the stock went"
    );
    let orders: i64 = conn.hlen(&shard.orders).await.unwrap();
    let counted: Option<i64> = conn.hget(&shard.audit, "sold/test/lua").await.unwrap();
    let sold_out: Option<i64> = conn.hget(&shard.audit, "sold_out").await.unwrap();
    assert_eq!((orders, counted, sold_out), (4, Some(4), None));
}

/// A line whose stock is not a whole number as Redis writes one (a key written by hand:
/// a fraction, a leading zero, past 64 bits, no number) fails before it writes anything —
/// no buyer, no order, no sold-out count — for a plain deduction, a buyer's and a line of
/// several.
#[tokio::test]
async fn a_stock_that_is_not_a_whole_number_fails_its_line_before_it_writes() {
    let redis = RedisServer::start();
    let mut conn = redis.conn().await;
    let shard = keys("102").whole();
    // The reset's terms: a lone deduction without a buyer is a plain one.
    let _: () = conn
        .hset_multiple(&shard.audit, &[("epoch", "1"), ("per_user", "0")])
        .await
        .unwrap();
    for stock in ["2.5", "-2.5", "00", "007", "99999999999999999999", "abc"] {
        let _: () = conn.set(&shard.stock, stock).await.unwrap();
        let (plain, with_buyer, several) = (&["o-1"][..], &["o-2"][..], &["o-3", "o-4"][..]);
        for (orders, user) in [(plain, ""), (with_buyer, "u-1"), (several, "u-1")] {
            let sales = orders.iter().map(|&order| scripts::Deduct {
                order,
                user,
                holder: "",
                key: "",
            });
            let replies: Vec<redis::Value> = scripts::deduct("test", "lua", [(&*shard, sales)])
                .invoke_async(&mut conn)
                .await
                .unwrap();
            let failed: String = redis::from_redis_value(replies[0].clone()).unwrap();
            assert!(failed.starts_with("line failed: "), "{stock}: {failed}");
        }
        let orders: i64 = conn.hlen(&shard.orders).await.unwrap();
        let buyers: i64 = conn.hlen(&shard.buyers).await.unwrap();
        let counted: Vec<String> = conn.hkeys(&shard.audit).await.unwrap();
        let left: String = conn.get(&shard.stock).await.unwrap();
        assert_eq!((orders, buyers, left.as_str()), (0, 0, stock));
        assert_eq!(counted, ["epoch", "per_user"], "{stock}: nothing counted");
    }
}

/// A line checks every deduction before it writes anything. One that fails on a later
/// deduction (a buyer's count written by hand, not a number) leaves nothing of the earlier
/// one: no buyer's count, no unpaid entry, no key's sale, no claim answered, no order, no
/// unit taken. One that fails on a write after its orders (a streamed sale whose stream is
/// a key of another type) has made its sales whole — units, orders, buyers' counts, unpaid
/// entries, the key's sale and its claim answered — and the look-up finds each.
#[tokio::test]
async fn a_line_writes_nothing_until_every_deduction_is_checked() {
    let redis = RedisServer::start();
    let mut conn = redis.conn().await;
    let shard = keys("103").whole();
    let _: () = conn.set(&shard.stock, 10).await.unwrap();
    let terms = [
        ("epoch", "1"),
        ("per_user", "2"),
        ("pay_within_ms", "60000"),
    ];
    let _: () = conn.hset_multiple(&shard.audit, &terms).await.unwrap();
    let claim = shard.claim("k-ann");
    // A claim as lua/idem_claim.lua writes it: of this sale (its epoch).
    let pending = [("state", "pending"), ("holder", "h-ann"), ("epoch", "1")];
    let _: () = conn.hset_multiple(&claim, &pending).await.unwrap();
    let sales = [("o-ann", "ann", "h-ann", "k-ann"), ("o-bob", "bob", "", "")];
    let call = || {
        let sales = sales
            .iter()
            .map(|&(order, user, holder, key)| scripts::Deduct {
                order,
                user,
                holder,
                key,
            });
        scripts::deduct("test", "lua", [(&*shard, sales)])
    };

    let _: () = conn.hset(&shard.buyers, "bob", "x").await.unwrap();
    let replies: Vec<redis::Value> = call().invoke_async(&mut conn).await.unwrap();
    let failed: String = redis::from_redis_value(replies[0].clone()).unwrap();
    assert!(failed.starts_with("line failed: "), "{failed}");
    let ann: Option<i64> = conn.hget(&shard.buyers, "ann").await.unwrap();
    let unpaid: i64 = conn.zcard(&shard.unpaid).await.unwrap();
    let keyed: i64 = conn.hlen(&shard.keys).await.unwrap();
    let state: String = conn.hget(&claim, "state").await.unwrap();
    let orders: i64 = conn.hlen(&shard.orders).await.unwrap();
    let stock: i64 = conn.get(&shard.stock).await.unwrap();
    let counted: Option<i64> = conn.hget(&shard.audit, "sold/test/lua").await.unwrap();
    assert_eq!(
        (ann, unpaid, keyed, state.as_str(), orders, stock, counted),
        (None, 0, 0, "pending", 0, 10, None),
        "nothing of ann's sale is written"
    );

    let _: () = conn.hset(&shard.buyers, "bob", 0).await.unwrap();
    let _: () = conn.hset(&shard.audit, "streamed", 1).await.unwrap();
    let _: () = conn.set(&shard.stream, "not a stream").await.unwrap();
    let replies: Vec<redis::Value> = call().invoke_async(&mut conn).await.unwrap();
    let failed: String = redis::from_redis_value(replies[0].clone()).unwrap();
    assert!(failed.starts_with("line failed: "), "{failed}");
    let buyers: (i64, i64) = (
        conn.hget(&shard.buyers, "ann").await.unwrap(),
        conn.hget(&shard.buyers, "bob").await.unwrap(),
    );
    let unpaid: i64 = conn.zcard(&shard.unpaid).await.unwrap();
    let keyed: Option<String> = conn.hget(&shard.keys, "k-ann").await.unwrap();
    let state: String = conn.hget(&claim, "state").await.unwrap();
    let orders: i64 = conn.hlen(&shard.orders).await.unwrap();
    let stock: i64 = conn.get(&shard.stock).await.unwrap();
    assert_eq!(
        (
            buyers,
            unpaid,
            keyed.as_deref(),
            state.as_str(),
            orders,
            stock
        ),
        ((1, 1), 2, Some("o-ann"), "done", 2, 8),
        "both sales made whole before the stream failed"
    );
    for order in ["o-ann", "o-bob"] {
        let (sold, left): (i64, Option<String>) = scripts::resolve(&shard, "", order)
            .invoke_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(
            (sold, left.as_deref()),
            (1, Some("8")),
            "{order} found sold"
        );
    }
}

/// A key sells once in a line: a second deduction under a key sold earlier in the same
/// line is taken over, as it would be in a later call (the claim is answered once the line
/// has written its orders).
#[tokio::test]
async fn a_key_sells_once_in_a_line() {
    let redis = RedisServer::start();
    let mut conn = redis.conn().await;
    let shard = keys("104").whole();
    let _: () = conn.set(&shard.stock, 10).await.unwrap();
    // A claim as lua/idem_claim.lua writes it: of this sale (no reset wrote one: epoch 0).
    let pending = [("state", "pending"), ("holder", "h"), ("epoch", "0")];
    let _: () = conn
        .hset_multiple(shard.claim("k"), &pending)
        .await
        .unwrap();
    let sales = ["o-1", "o-2"].map(|order| scripts::Deduct {
        order,
        user: "",
        holder: "h",
        key: "k",
    });
    let replies: Vec<Vec<Reply>> = scripts::deduct("test", "lua", [(&*shard, sales)])
        .invoke_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(
        replies,
        [[
            Reply::Units(10),
            Reply::Units(1),
            Reply::Refused(Refusal::TakenOver)
        ]]
    );
    let stock: i64 = conn.get(&shard.stock).await.unwrap();
    let orders: i64 = conn.hlen(&shard.orders).await.unwrap();
    let twice: Option<i64> = conn.hget(&shard.audit, "keys_sold_twice").await.unwrap();
    let answer: String = conn.hget(shard.claim("k"), "order").await.unwrap();
    assert_eq!((stock, orders, twice, answer.as_str()), (9, 1, None, "o-1"));
}

/// A line of one plain deduction (no buyer, no key, a sale with none of the terms that add
/// steps), which `deduct.lua` writes out on its own, comes to what the general steps do:
/// the same answers and the same writes, sold, sent again, sold out and sent again. And a
/// deduction that is plain but for one thing — a close, a stream, a payment window, a
/// voided id, a buyer, a key — gets the general steps. Each case runs on two products, one
/// whose audit says its buyer limit is 0 (as a reset writes it: plain when nothing else
/// stands in the way) and one whose audit does not (always the general steps).
#[tokio::test]
async fn a_plain_deduction_comes_to_what_the_general_steps_do() {
    let redis = RedisServer::start();
    let mut conn = redis.conn().await;
    /// A case: its name, the terms its reset would have written, its buyer and its key.
    type Case = (&'static str, Terms, &'static str, &'static str);
    type Terms = &'static [(&'static str, &'static str)];
    let cases: [Case; 7] = [
        ("plain", &[], "", ""),
        ("closed", &[("closed_at", "1")], "", ""),
        ("streamed", &[("streamed", "1")], "", ""),
        ("a payment window", &[("pay_within_ms", "60000")], "", ""),
        ("a voided id", &[("voided", "1")], "", ""),
        ("a buyer", &[], "u-1", ""),
        ("a key", &[], "", "k-1"),
    ];
    for (i, (case, terms, user, key)) in cases.into_iter().enumerate() {
        let pair = [
            keys(&format!("{i}a")).whole(),
            keys(&format!("{i}b")).whole(),
        ];
        let mut seen = Vec::new();
        for (j, shard) in pair.iter().enumerate() {
            let _: () = conn.set(&shard.stock, 1).await.unwrap();
            let _: () = conn.hset(&shard.audit, "epoch", "1").await.unwrap();
            if !terms.is_empty() {
                let _: () = conn.hset_multiple(&shard.audit, terms).await.unwrap();
            }
            if j == 0 {
                let _: () = conn.hset(&shard.audit, "per_user", 0).await.unwrap();
            }
            let _: () = conn.hset(&shard.void, "x-3", 1).await.unwrap();
            let claim = shard.claim("k-1");
            let _: () = conn
                .hset_multiple(
                    &claim,
                    &[("state", "pending"), ("holder", "h"), ("epoch", "1")],
                )
                .await
                .unwrap();
            let mut replies = Vec::new();
            for order in ["x-1", "x-1", "x-2", "x-2", "x-3"] {
                let sale = scripts::Deduct {
                    order,
                    user,
                    holder: "h",
                    key,
                };
                let reply: Vec<Vec<Reply>> = scripts::deduct("test", "lua", [(&**shard, [sale])])
                    .invoke_async(&mut conn)
                    .await
                    .unwrap();
                replies.push(reply);
            }
            let stock: i64 = conn.get(&shard.stock).await.unwrap();
            let orders: Vec<(String, String)> = conn.hgetall(&shard.orders).await.unwrap();
            let mut audit: Vec<(String, String)> = conn.hgetall(&shard.audit).await.unwrap();
            audit.retain(|(field, _)| field != "per_user");
            audit.sort();
            let buyers: Vec<(String, String)> = conn.hgetall(&shard.buyers).await.unwrap();
            let streamed: i64 = conn.xlen(&shard.stream).await.unwrap();
            let unpaid: i64 = conn.zcard(&shard.unpaid).await.unwrap();
            let claim: Option<String> = conn.hget(&claim, "state").await.unwrap();
            seen.push((
                replies, stock, orders, audit, buyers, streamed, unpaid, claim,
            ));
        }
        if case == "plain" {
            let (sold, sold_out) = (Reply::Units(1), Reply::Units(0));
            assert_eq!(
                seen[0].0,
                [
                    [[Reply::Units(1), sold]],
                    [[Reply::Units(0), sold]],
                    [[Reply::Units(0), sold_out]],
                    [[Reply::Units(0), sold_out]],
                    [[Reply::Units(0), sold_out]]
                ]
            );
            assert_eq!(seen[0].1, 0);
        }
        assert_eq!(
            seen[0], seen[1],
            "{case}: the plain line against the general steps"
        );
    }
}

/// Each line of a call reads its own product's terms: a buyer limit and a stream on the
/// first product are not the second's.
#[tokio::test]
async fn each_line_of_a_call_keeps_its_own_products_terms() {
    let redis = RedisServer::start();
    let mut conn = redis.conn().await;
    let (limited, open) = (keys("103").whole(), keys("104").whole());
    for shard in [&limited, &open] {
        let _: () = conn.set(&shard.stock, 5).await.unwrap();
    }
    let _: () = conn
        .hset_multiple(
            &limited.audit,
            &[("epoch", "1"), ("per_user", "1"), ("streamed", "1")],
        )
        .await
        .unwrap();
    let _: () = conn.hset(&open.audit, "epoch", "1").await.unwrap();
    let sale = |order| scripts::Deduct {
        order,
        user: "u-1",
        holder: "",
        key: "",
    };
    let lines = [
        (&*limited, vec![sale("l-1"), sale("l-2")]),
        (&*open, vec![sale("o-1"), sale("o-2")]),
    ];
    let replies: Vec<Vec<Reply>> = scripts::deduct("test", "lua", lines)
        .invoke_async(&mut conn)
        .await
        .unwrap();
    let sold = Reply::Units(1);
    let limit = Reply::Refused(Refusal::LimitReached);
    assert_eq!(
        replies,
        [
            vec![Reply::Units(5), sold, limit],
            vec![Reply::Units(5), sold, sold]
        ]
    );
    let streamed: (i64, i64) = (
        conn.xlen(&limited.stream).await.unwrap(),
        conn.xlen(&open.stream).await.unwrap(),
    );
    assert_eq!(
        streamed,
        (1, 0),
        "the first line's orders streamed, on its own stream"
    );
}

/// One call of `deduct.lua` sells several products, a line each (what an instance on one
/// Redis sends for a sale spread over many products): each line takes its own product's
/// units, answers its own deductions in their order, and a product without a stock key
/// answers its line empty (not for sale) and takes nothing from the others.
#[tokio::test]
async fn the_lock_free_script_sells_several_products_in_one_call() {
    let redis = RedisServer::start();
    let mut conn = redis.conn().await;
    let (a, b, gone) = (
        keys("201").whole(),
        keys("202").whole(),
        keys("203").whole(),
    );
    let _: () = conn.set(&a.stock, 1).await.unwrap();
    let _: () = conn.set(&b.stock, 5).await.unwrap();
    let sale = |order| scripts::Deduct {
        order,
        user: "",
        holder: "h",
        key: "",
    };
    let lines = [
        (&*a, vec![sale("a-1"), sale("a-2")]),
        (&*gone, vec![sale("g-1")]),
        (&*b, vec![sale("b-1")]),
    ];
    let replies: Vec<Vec<Reply>> = scripts::deduct("test", "lua", lines)
        .invoke_async(&mut conn)
        .await
        .unwrap();
    let (sold, sold_out) = (Reply::Units(1), Reply::Units(0));
    assert_eq!(
        replies,
        [
            vec![Reply::Units(1), sold, sold_out],
            vec![],
            vec![Reply::Units(5), sold]
        ]
    );
    let left: (i64, i64) = (
        conn.get(&a.stock).await.unwrap(),
        conn.get(&b.stock).await.unwrap(),
    );
    assert_eq!(left, (0, 4));
    let orders: (i64, i64) = (
        conn.hlen(&a.orders).await.unwrap(),
        conn.hlen(&b.orders).await.unwrap(),
    );
    assert_eq!(orders, (1, 1), "an order recorded where each unit was sold");
    let sold_out: Option<i64> = conn.hget(&a.audit, "sold_out").await.unwrap();
    assert_eq!(sold_out, Some(1), "a-2 counted sold out on its own product");
}

/// One product's line that fails in a call of several (its stock a key of another type)
/// fails alone: the lines before and after it sell, each keyed sale's claim (the keys after
/// its line's nine) gets its answer, and a line without a stock key still takes its claims'
/// keys, so the next line's claim is its own.
#[tokio::test]
async fn a_failing_line_fails_alone_and_every_claim_is_its_sales() {
    let redis = RedisServer::start();
    let mut conn = redis.conn().await;
    let (a, bad, gone, d) = (
        keys("301").whole(),
        keys("302").whole(),
        keys("303").whole(),
        keys("304").whole(),
    );
    let _: () = conn.set(&a.stock, 5).await.unwrap();
    let _: () = conn.hset(&bad.stock, "not", "a number").await.unwrap();
    let _: () = conn.set(&d.stock, 5).await.unwrap();
    for (shard, key) in [(&a, "k-a"), (&gone, "k-c"), (&d, "k-d")] {
        let claim = shard.claim(key);
        let _: () = conn
            .hset_multiple(
                &claim,
                &[("state", "pending"), ("holder", "h"), ("epoch", "0")],
            )
            .await
            .unwrap();
    }
    let sale = |order, key| scripts::Deduct {
        order,
        user: "",
        holder: "h",
        key,
    };
    let lines = [
        (&*a, vec![sale("a-1", "k-a")]),
        (&*bad, vec![sale("b-1", "")]),
        (&*gone, vec![sale("c-1", "k-c")]),
        (&*d, vec![sale("d-1", "k-d")]),
    ];
    let replies: Vec<redis::Value> = scripts::deduct("test", "lua", lines)
        .invoke_async(&mut conn)
        .await
        .unwrap();
    let line = |i: usize| -> Vec<Reply> { redis::from_redis_value(replies[i].clone()).unwrap() };
    let sold = Reply::Units(1);
    assert_eq!(line(0), [Reply::Units(5), sold]);
    let failed: String = redis::from_redis_value(replies[1].clone()).unwrap();
    assert!(failed.starts_with("line failed: "), "{failed}");
    assert_eq!(line(2), []);
    assert_eq!(line(3), [Reply::Units(5), sold]);
    for (shard, key, state) in [
        (&a, "k-a", "done"),
        (&gone, "k-c", "pending"),
        (&d, "k-d", "done"),
    ] {
        let now: Option<String> = conn.hget(shard.claim(key), "state").await.unwrap();
        assert_eq!(now.as_deref(), Some(state), "{key}");
    }
    let left: (i64, i64) = (
        conn.get(&a.stock).await.unwrap(),
        conn.get(&d.stock).await.unwrap(),
    );
    assert_eq!(left, (4, 4));
}

/// The buyer's limit, which `deduct.lua` reads with the sale's terms in the audit hash
/// (where a reset writes it), is still kept for a sale whose audit has none — reset by a
/// version that wrote it only in the product's meta: the meta's is read then.
#[tokio::test]
async fn the_buyer_limit_is_kept_from_the_audit_or_else_from_the_meta() {
    let redis = RedisServer::start();
    let mut conn = redis.conn().await;
    let shard = keys("101").whole();
    let buy = |order: &'static str| {
        let sale = scripts::Deduct {
            order,
            user: "ann",
            holder: "h",
            key: "",
        };
        scripts::deduct("test", "lua", [(&*shard, [sale])])
    };
    let limited = Reply::Refused(Refusal::LimitReached);
    // As this version's reset writes it: in the audit (and the meta).
    let _: () = conn.set(&shard.stock, 10).await.unwrap();
    let _: () = conn.hset(&shard.audit, "per_user", 1).await.unwrap();
    let first: Vec<Vec<Reply>> = buy("o-1").invoke_async(&mut conn).await.unwrap();
    let second: Vec<Vec<Reply>> = buy("o-2").invoke_async(&mut conn).await.unwrap();
    assert_eq!(first, [[Reply::Units(10), Reply::Units(1)]]);
    assert_eq!(second, [[Reply::Units(9), limited]], "the audit's limit");
    // As an older reset wrote it: in the meta only.
    let _: () = conn.hdel(&shard.audit, "per_user").await.unwrap();
    let _: () = conn.hset(&shard.meta, "per_user", 1).await.unwrap();
    let third: Vec<Vec<Reply>> = buy("o-3").invoke_async(&mut conn).await.unwrap();
    assert_eq!(third, [[Reply::Units(9), limited]], "the meta's limit");
    let stock: i64 = conn.get(&shard.stock).await.unwrap();
    assert_eq!(stock, 9);
}

/// An order id in the void hash is marked in the audit whoever put it there: one voided by
/// an older `resolve.lua` (which did not count it) and looked up again is marked then, and
/// `deduct.lua`, which looks in the void hash only for a marked product, refuses it.
#[tokio::test]
async fn a_voided_id_is_marked_in_the_audit_even_if_voided_before() {
    let redis = RedisServer::start();
    let mut conn = redis.conn().await;
    let shard = keys("101").whole();
    let _: () = conn.set(&shard.stock, 5).await.unwrap();
    // As an older resolve.lua left it: in the void hash, not counted.
    let _: () = conn.hset(&shard.void, "o-1", 1).await.unwrap();
    let (sold, _): (i64, Option<i64>) = scripts::resolve(&shard, "h", "o-1")
        .invoke_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(sold, 0);
    let marked: Option<i64> = conn.hget(&shard.audit, "voided").await.unwrap();
    assert!(marked.is_some_and(|n| n > 0), "marked: {marked:?}");
    let sale = scripts::Deduct {
        order: "o-1",
        user: "",
        holder: "h",
        key: "",
    };
    let answer: Vec<Vec<Reply>> = scripts::deduct("test", "lua", [(&*shard, [sale])])
        .invoke_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(answer, [[Reply::Units(5), Reply::Refused(Refusal::Voided)]]);
}
