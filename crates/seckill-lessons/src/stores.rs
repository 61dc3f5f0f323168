//! The lessons on the stores beside the stock Redis: Redlock's servers, ZooKeeper, and
//! PostgreSQL — the orders' backlog, the database's locks, and seed 003's table side by
//! side. Listed in [`crate::catalogue::LESSONS`] with the others.

use crate::lesson::{Lesson, Needs, Phase, phase};

const LUA: &str = "lua";
const TOKEN: &str = "token";
const WATCHDOG: &str = "watchdog";
const REDLOCK_LOCK: &str = "redlock";
const ZOOKEEPER_LOCK: &str = "zookeeper";
const PG_UNIQUE_LOCK: &str = "pg_unique";
const PG_ADVISORY_LOCK: &str = "pg_advisory";
const PG_UPDATE_STOCK: &str = "pg_update";

pub(crate) const REDLOCK: Lesson = Lesson {
    name: "redlock",
    title: "redlock: one lock on a majority of five servers",
    title_zh: "红锁：在五台服务器的多数派上加一把锁",
    watch: "The same six buyers, three at a time, and 1 s of work, the lock now taken on \
            a majority of independent Redis servers. One holder at a time, no red, exactly the stock sold \
            — at the price of a round trip to every server for each lock (compare its \
            goodput and p99 in the side by side table).",
    watch_zh: "同样六个买家、每次三个，1 秒业务，锁改为在多台独立 Redis 的多数派上获取。任何时刻只有一个 \
               持有者，没有红色，恰好卖出库存——代价是每次加锁都要访问每台服务器 \
               （在对比表里看它的吞吐和 p99）。",
    phases: &[phase(
        "redlock, work 1000",
        3,
        1,
        REDLOCK_LOCK,
        "work_ms=1000&ttl_ms=5000&wait_ms=10000",
        6,
        3,
    )],
    needs: Needs::RedlockServers,
    failure_mode: false,
};

pub(crate) const ZOOKEEPER: Lesson = Lesson {
    name: "zookeeper",
    title: "zookeeper: the lock on a consensus store",
    title_zh: "zookeeper：基于共识存储的锁",
    watch: "The same six buyers, three at a time, and 1 s of work on ZooKeeper: each waiter's node watches \
            the one before it, so the lock passes down the queue in order; the session is \
            the lease, with nothing to renew by hand. One holder at a time, exactly the \
            stock sold; slower per lock than Redis.",
    watch_zh: "同样六个买家、每次三个，1 秒业务，锁在 ZooKeeper 上：每个等待者的节点监听前一个节点，锁按队列 \
               顺序传递；会话就是租约，不用手动续期。任何时刻只有一个持有者，恰好卖出库存； \
               每次加锁比 Redis 慢。",
    phases: &[phase(
        "zookeeper, work 1000",
        3,
        1,
        ZOOKEEPER_LOCK,
        "work_ms=1000&wait_ms=10000",
        6,
        3,
    )],
    needs: Needs::ZooKeeper,
    failure_mode: false,
};

pub(crate) const ORDERS: Lesson = Lesson {
    name: "orders",
    title: "orders of record: the backlog drains into PostgreSQL",
    title_zh: "订单落库：积压流入 PostgreSQL",
    watch: "The lock-free script sells 2,000 requests' worth as fast as Redis can, and each \
            order goes to a Redis Stream. Watch the backlog rise while the sale runs and \
            drain after it, as the consumers write the orders to PostgreSQL; in database \
            ends equal to sold, with no drift.",
    watch_zh: "无锁脚本以 Redis 的最快速度处理 2000 个请求，每个订单写入 Redis Stream。看“积压” \
               在售卖时上升、售卖后回落：消费者把订单写入 PostgreSQL；最后“已落库”等于“已售”， \
               没有偏差。",
    phases: &[Phase {
        streamed: true,
        ..phase("lua, streamed", 1_500, 1, LUA, "", 2_000, 100)
    }],
    needs: Needs::OrdersDb,
    failure_mode: false,
};

pub(crate) const PG_LOCKS: Lesson = Lesson {
    name: "pg_locks",
    title: "the database's locks: a dead holder, a row against a connection",
    title_zh: "数据库锁：持锁者死掉了，一行记录对比一条连接",
    watch: "Seed 003's first row. First the lock is a row with a unique key (INSERT to \
            lock, DELETE to unlock): its holder dies before its DELETE, the row stays, and \
            every later buyer waits in vain and is 429 lock busy — the deadlock setnx has, \
            in the database. Then PostgreSQL's advisory lock, held by a transaction: its \
            holder dies the same way, its connection closes, and PostgreSQL frees the lock \
            at once — the stock sells. Last, the row with a lease (lock_until, as ShedLock \
            and Spring do): the dead holder's row is taken over after one second.",
    watch_zh: "种子文章 003 表格的第一行。先是“唯一索引一行记录就是锁”（INSERT 加锁，DELETE \
               解锁）：持锁者在 DELETE 之前死掉，这行记录留了下来，之后的每个买家都白等，得到 429 \
               （锁被占用）——和 setnx 一样的死锁，只是发生在数据库里。然后是 PostgreSQL 的咨询锁， \
               由一个事务持有：持锁者同样死掉，它的连接断开，PostgreSQL 立刻释放锁——库存照常卖出。 \
               最后是带租约的行锁（lock_until，ShedLock 和 Spring 的做法）：死掉的持锁者的那行 \
               记录在一秒后被接管。",
    phases: &[
        Phase {
            first: Some("fault=abandon"),
            ..phase(
                "pg_unique, holder died",
                10,
                1,
                PG_UNIQUE_LOCK,
                "wait_ms=300",
                40,
                10,
            )
        },
        Phase {
            first: Some("fault=abandon"),
            ..phase(
                "pg_advisory, holder died",
                10,
                1,
                PG_ADVISORY_LOCK,
                "wait_ms=300",
                40,
                10,
            )
        },
        Phase {
            first: Some("fault=abandon&lease_ms=1000"),
            ..phase(
                "pg_unique lease_ms=1000, holder died",
                10,
                1,
                PG_UNIQUE_LOCK,
                "lease_ms=1000&wait_ms=3000",
                40,
                10,
            )
        },
    ],
    needs: Needs::OrdersDbAndFaults,
    failure_mode: false,
};

pub(crate) const SEED003: Lesson = Lesson {
    name: "seed003",
    title: "seed 003's table: the database and Redis side by side",
    title_zh: "种子文章 003 的表格：数据库与 Redis 并排对比",
    watch: "The same 400 buyers, 100 at a time, six ways. The stock in a PostgreSQL row, \
            sold by one conditional UPDATE, against the stock in Redis sold by a Lua script: \
            compare their goodput — how hot one row gets is why every flash sale moves its \
            stock to Redis. Then the seed's database lock (a unique key, waiters polling) \
            against Redis's SET NX PX, PostgreSQL's advisory lock against the watchdog lock. \
            No red anywhere: every one sells exactly its stock; they differ in speed. \
            scripts/seed003.sh measures the whole table, with the seed's four conditions.",
    watch_zh: "同样 400 个买家、每次 100 个并发，六种做法。库存放在 PostgreSQL 的一行里、用一条 \
               条件 UPDATE 扣减，对比库存放在 Redis、用 Lua 脚本扣减：比较它们的有效吞吐——一行 \
               记录有多热，就是每个秒杀都把库存搬到 Redis 的原因。然后是种子文章里的数据库锁 \
               （唯一索引，等待者轮询）对比 Redis 的 SET NX PX，PostgreSQL 咨询锁对比看门狗锁。 \
               哪里都没有红色：每种都恰好卖出库存，区别在于速度。scripts/seed003.sh 测出整张表， \
               连同种子文章的四个条件。",
    phases: &[
        phase("pg_update @100", 400, 1, PG_UPDATE_STOCK, "", 400, 100),
        phase("lua @100", 400, 1, LUA, "", 400, 100),
        phase(
            "pg_unique @100",
            400,
            1,
            PG_UNIQUE_LOCK,
            "wait_ms=10000",
            400,
            100,
        ),
        phase("token @100", 400, 1, TOKEN, "wait_ms=10000", 400, 100),
        phase(
            "pg_advisory @100",
            400,
            1,
            PG_ADVISORY_LOCK,
            "wait_ms=10000",
            400,
            100,
        ),
        phase("watchdog @100", 400, 1, WATCHDOG, "wait_ms=10000", 400, 100),
    ],
    needs: Needs::OrdersDb,
    failure_mode: false,
};
