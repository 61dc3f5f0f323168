//! The lessons, each defined once: the page starts them, and `seckill-bench --lessons`
//! adds the failure modes among them to its table as rows.

use seckill_load::Buyers;

use crate::lesson::{Lesson, Needs, Phase, phase};
use crate::stores;

// The variants, by the names the service's registry knows them by.
const NAIVE: &str = "naive";
const SETNX: &str = "setnx";
const TOKEN: &str = "token";
const WATCHDOG: &str = "watchdog";
const SEGMENTED: &str = "segmented";
const SHARES: &str = "shares";
const LUA: &str = "lua";
const OPTIMISTIC: &str = "optimistic";
const MULTI: &str = "multi";

/// The slow lessons' terms, so that a class can follow each holder on the timeline: three
/// buyers at a time, each working 1.5 s inside, under a lease of 1 s — the work outlasts
/// the lease. (A lease shorter than that is lost to a stall of a few hundred ms on a busy
/// laptop, which is a lesson of its own.)
pub const LONG_WORK_MS: u64 = 1_500;
pub const SHORT_TTL_MS: u64 = 1_000;

/// Each buyer clicks three times at once (the per-user limit's lesson: its 30 requests are
/// ten buyers).
const CLICKING_THRICE: Buyers = Buyers {
    users: None,
    clicks: 3,
};

/// The lessons, in the progression's order.
pub const LESSONS: &[Lesson] = &[
    Lesson {
        name: "naive",
        title: "naive: GET, then SET, from two instances",
        title_zh: "naive：先 GET 再 SET，两个实例",
        watch: "Watch sold run past the stock and oversold and lost updates climb. Two instances \
                read the same stock, each writes stock-1 back, and one sale vanishes from the \
                stock: a lost update. Every request is answered 200, so the stock runs out on \
                paper long after it ran out for real. No lock, so nothing on the timeline.",
        watch_zh: "看“已售”超过库存，“超卖”和“丢失更新”不断增加。两个实例读到同一个库存，各自写回 \
                   库存-1，一次扣减就从库存里消失了：这就是丢失更新。每个请求都返回 200，所以库存真正卖完 \
                   很久以后，账面上的库存才卖完。没有锁，所以时间线上没有条。",
        phases: &[phase("naive", 500, 1, NAIVE, "work_ms=2", 2_000, 100)],
        needs: Needs::Nothing,
        failure_mode: false,
    },
    Lesson {
        name: "setnx",
        title: "setnx: a holder dies with the lock",
        title_zh: "setnx：持锁者带着锁死掉了",
        watch: "The first buyer takes the SETNX lock and dies before its DEL. The lock has no \
                TTL: it shows held, never expires, and every later buyer is 429 lock busy. \
                Nothing sells until an operator deletes the lock. A lock needs a TTL.",
        watch_zh: "第一个买家用 SETNX 拿到锁，在 DEL 之前就死掉了。这把锁没有过期时间：它一直被持有、 \
                   永不过期，之后的每个买家都得到 429（锁被占用）。在运维手动删锁之前，一件也卖不出去。 \
                   锁必须有过期时间。",
        phases: &[Phase {
            first: Some("fault=abandon"),
            ..phase("setnx, holder died", 10, 1, SETNX, "", 40, 10)
        }],
        needs: Needs::Faults,
        failure_mode: true,
    },
    Lesson {
        name: "token",
        title: "token: the work outlasts the TTL",
        title_zh: "token：业务时间超过了锁的过期时间",
        watch: "Six buyers, three at a time, for three units; each works 1.5 s under a 1 s \
                TTL. On the timeline the lock expires under its holder (the cross on its \
                bar), the next buyer gets in while the first is still inside, and the two bars \
                overlap in red: the overlaps counter climbs, and a unit can sell twice. The \
                token only keeps a holder from deleting someone else's lock; it does not keep \
                the lock.",
        watch_zh: "六个买家、每次三个，抢三件商品；每个在 1 秒的过期时间下要工作 1.5 秒。时间线上， \
                   锁在持有者手里过期了（条上的叉），下一个买家在前一个还没出来时就进去了，两根条在 \
                   时间上重叠，画成红色：“重叠”计数上升，同一件商品可能卖两次（超卖）。token 只能 \
                   防止误删别人的锁，并不能让锁一直有效。",
        phases: &[phase(
            "token, work 1500 > ttl 1000",
            3,
            1,
            TOKEN,
            "work_ms=1500&ttl_ms=1000&wait_ms=10000",
            6,
            3,
        )],
        needs: Needs::Nothing,
        failure_mode: true,
    },
    Lesson {
        name: "watchdog",
        title: "watchdog: the same work, a lease that is renewed",
        title_zh: "看门狗：同样的业务，租约不断续期",
        watch: "The same six buyers, three at a time, the same 1.5 s of work, the same 1 s \
                lease. Watch the ticks on each bar: the watchdog renews the lease every third \
                of a second while its holder works, so the lease never runs out under it. The \
                bars follow one another, none red: exactly the stock sold, one holder at a time.",
        watch_zh: "同样六个买家、每次三个，同样 1.5 秒的业务、同样 1 秒的租约。看每根条上的刻度： \
                   持有者工作时，看门狗每三分之一秒续期一次，租约不会在它手里过期。条一根接一根， \
                   没有红色：恰好卖出库存，任何时刻只有一个持有者。",
        phases: &[phase(
            "watchdog, work 1500 > lease 1000",
            3,
            1,
            WATCHDOG,
            "work_ms=1500&lease_ms=1000&renew=on&wait_ms=10000",
            6,
            3,
        )],
        needs: Needs::Nothing,
        failure_mode: true,
    },
    Lesson {
        name: "fair",
        title: "fair against unfair: who gets the lock next",
        title_zh: "公平锁与非公平锁：下一个轮到谁",
        watch: "Four buyers at a time, half a second of work each. Unfair first: a holder hands \
                the lock to a waiter of its own instance (the arrows), so one instance's bars \
                come in runs while the other's buyers wait longer (longer thin wait bars). Then \
                fair: a queue in Redis serves the buyers in the order they arrived, whichever \
                instance they came through — the bars alternate.",
        watch_zh: "每次四个买家，每人工作半秒。先看非公平锁：持有者把锁直接交给本实例的等待者（箭头）， \
                   所以一个实例的条连成一串，另一个实例的买家等得更久（等待细条更长）。再看公平锁： \
                   Redis 里的队列按到达顺序服务，不管买家来自哪个实例——两个实例的条交替出现。",
        phases: &[
            phase(
                "unfair",
                12,
                1,
                WATCHDOG,
                "work_ms=500&wait_ms=10000",
                12,
                4,
            ),
            phase(
                "fair",
                12,
                1,
                WATCHDOG,
                "work_ms=500&wait_ms=10000&fair=on",
                12,
                4,
            ),
        ],
        needs: Needs::Nothing,
        failure_mode: false,
    },
    Lesson {
        name: "segmented",
        title: "segmented x8 against one lock",
        title_zh: "分段锁 x8 对比一把锁",
        watch: "First one watchdog lock for the whole stock, then the same stock split into 8 \
                shards with a lock each. Watch the goodput line: eight holders work at once, so \
                the split stock sells several times faster, and the shard bars drain together.",
        watch_zh: "先用一把看门狗锁保护全部库存，再把同样的库存分成 8 段，每段一把锁。看吞吐曲线： \
                   8 个持有者同时工作，分段后的库存卖得快好几倍，各段的库存条一起下降。",
        phases: &[
            phase(
                "watchdog",
                500,
                1,
                WATCHDOG,
                "work_ms=2&wait_ms=5000",
                1_000,
                100,
            ),
            phase(
                "segmented x8",
                500,
                8,
                SEGMENTED,
                "work_ms=2&wait_ms=5000",
                1_000,
                100,
            ),
        ],
        needs: Needs::Nothing,
        failure_mode: false,
    },
    Lesson {
        name: "shares",
        title: "shares: each instance sells its own share",
        title_zh: "份额：每个实例卖自己的那一份",
        watch: "The end of seed 000: the stock is split into shares; each instance takes one \
                and sells it under a lock in its own process, with no Redis lock at all, and \
                takes the next when it runs out. Exactly the stock sold, near the lock-free \
                line, and nothing on the lock timeline: there is no shared lock to hold.",
        watch_zh: "种子文章 000 的结尾：把库存分成若干份额，每个实例领取一份，在自己进程内的锁下卖， \
                   完全不用 Redis 锁，卖完再领下一份。恰好卖出库存，吞吐接近无锁的上限； \
                   锁时间线上什么也没有：根本没有共享的锁。",
        phases: &[phase("shares", 500, 1, SHARES, "work_ms=2", 1_000, 100)],
        needs: Needs::Nothing,
        failure_mode: false,
    },
    Lesson {
        name: "lua",
        title: "lua: no lock at all",
        title_zh: "lua：完全不用锁",
        watch: "One script checks, takes a unit and records the order atomically inside Redis: \
                no lock, nothing to wait for. Exactly the stock sold, the fastest line on the \
                chart: the ceiling every lock is measured against.",
        watch_zh: "一个脚本在 Redis 里原子地检查库存、扣减一件、记录订单：没有锁，没有等待。 \
                   恰好卖出库存，是图上最快的曲线：衡量每把锁的上限。",
        phases: &[phase("lua", 500, 1, LUA, "", 2_000, 100)],
        needs: Needs::Nothing,
        failure_mode: false,
    },
    Lesson {
        name: "per_user",
        title: "one per buyer: three clicks at once",
        title_zh: "一人一单：同时点三下",
        watch: "Each buyer may have one unit, and each clicks three times at once. naive checks \
                what the buyer has, works, then records: all three clicks pass the check, and \
                over the limit climbs. The watchdog variant checks inside its critical section, \
                in the commit: one unit per buyer, the other clicks 403 limit reached.",
        watch_zh: "每个买家限购一件，每人同时点三下。naive 先查买家买了几件、再工作、再记录：三次点击 \
                   都通过了检查，“超出限购”上升。看门狗变体在临界区内、提交时检查：每人一件， \
                   其余点击得到 403（已达限购）。",
        phases: &[
            Phase {
                per_user: 1,
                buyers: Some(CLICKING_THRICE),
                ..phase("naive, 1 per buyer", 30, 1, NAIVE, "work_ms=50", 30, 9)
            },
            Phase {
                per_user: 1,
                buyers: Some(CLICKING_THRICE),
                ..phase(
                    "watchdog, 1 per buyer",
                    30,
                    1,
                    WATCHDOG,
                    "work_ms=50&wait_ms=10000",
                    30,
                    9,
                )
            },
        ],
        needs: Needs::Nothing,
        failure_mode: false,
    },
    Lesson {
        name: "optimistic",
        title: "optimistic: WATCH, and what contention costs",
        title_zh: "乐观锁：WATCH，以及竞争的代价",
        watch: "No lock: WATCH the stock, read it, work, then MULTI/EXEC, which fails when \
                somebody sold in between, and the buyer tries again (three times). With one \
                buyer at a time nothing conflicts; with 10, 50, 100 at once most tries \
                conflict: goodput falls and buyers are turned away while units are left \
                (the contention curve in the side by side chart). Never oversold.",
        watch_zh: "不加锁：WATCH 库存、读取、工作，然后 MULTI/EXEC；如果中间有人卖出，EXEC 失败， \
                   买家重试（三次）。一次一个买家时没有冲突；10、50、100 个同时来时大多数尝试都冲突： \
                   吞吐下降，还有库存时买家就被拒绝（对比图里的竞争曲线）。永远不会超卖。",
        phases: &[
            phase("optimistic x1", 400, 1, OPTIMISTIC, "work_ms=2", 100, 1),
            phase("optimistic x10", 400, 1, OPTIMISTIC, "work_ms=2", 300, 10),
            phase("optimistic x50", 400, 1, OPTIMISTIC, "work_ms=2", 300, 50),
            phase("optimistic x100", 400, 1, OPTIMISTIC, "work_ms=2", 300, 100),
        ],
        needs: Needs::Nothing,
        failure_mode: false,
    },
    Lesson {
        name: "multi",
        title: "MultiLock: two carts, opposite orders, a deadlock",
        title_zh: "联锁：两个购物车，相反的加锁顺序，死锁",
        watch: "Carts of two products, half of them locking A then B, the other half B then A. \
                One holds A and waits for B, the other holds B and waits for A: a deadlock only \
                the wait breaks — both give up, units stay unsold, buyers are turned away. Then \
                the same carts with the locks in one sorted order: no deadlock.",
        watch_zh: "两件商品的购物车，一半先锁 A 再锁 B，另一半先锁 B 再锁 A。一个拿着 A 等 B， \
                   另一个拿着 B 等 A：死锁，只有等待超时才能打破——双方都放弃，商品卖不出去， \
                   买家被拒绝。然后同样的购物车按统一排序加锁：不会死锁。",
        phases: &[
            Phase {
                alternate: Some(
                    "products={cart_reversed}&lock_order=given&work_ms=300&wait_ms=1000",
                ),
                ..phase(
                    "multi, given order",
                    20,
                    1,
                    MULTI,
                    "products={cart}&lock_order=given&work_ms=300&wait_ms=1000",
                    20,
                    4,
                )
            },
            Phase {
                alternate: Some(
                    "products={cart_reversed}&lock_order=sorted&work_ms=300&wait_ms=10000",
                ),
                ..phase(
                    "multi, sorted order",
                    20,
                    1,
                    MULTI,
                    "products={cart}&lock_order=sorted&work_ms=300&wait_ms=10000",
                    20,
                    4,
                )
            },
        ],
        needs: Needs::Nothing,
        failure_mode: false,
    },
    Lesson {
        name: "close",
        title: "closing the sale: check, then sell, against a read-write lock",
        title_zh: "关闭售卖：先检查再卖，对比读写锁",
        watch: "The sale is closed (/admin/close) while buyers are inside. With guard=check, a \
                buyer that checked \"open\" just before the close still sells after it: sold after \
                close climbs. With guard=rw each buyer holds the product's read lock from the \
                check to the sale, and the close takes the write lock: it waits for them, and \
                nothing sells after it.",
        watch_zh: "买家还在临界区内时关闭售卖（/admin/close）。guard=check 时，在关闭前一刻检查到 \
                   “开放”的买家在关闭后仍然卖出：“关闭后售出”上升。guard=rw 时，每个买家从检查到 \
                   售出都持有商品的读锁，关闭操作要拿写锁：它会等这些买家，之后一件也不会再卖。",
        phases: &[
            Phase {
                close_after_ms: Some(1_000),
                ..phase(
                    "guard=check",
                    200,
                    1,
                    WATCHDOG,
                    "guard=check&work_ms=20&wait_ms=5000",
                    300,
                    20,
                )
            },
            Phase {
                close_after_ms: Some(1_000),
                ..phase(
                    "guard=rw",
                    200,
                    1,
                    WATCHDOG,
                    "guard=rw&work_ms=20&wait_ms=5000",
                    300,
                    20,
                )
            },
        ],
        needs: Needs::Nothing,
        failure_mode: false,
    },
    stores::REDLOCK,
    stores::ZOOKEEPER,
    stores::ORDERS,
    stores::PG_LOCKS,
    stores::SEED003,
    crate::door::WAITING_ROOM,
];

pub fn find(name: &str) -> Option<&'static Lesson> {
    LESSONS.iter().find(|l| l.name == name)
}
