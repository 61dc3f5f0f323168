-- The database as a lock store and as a stock store (seed 003's first row, and the
-- tutorials' starting point): src/database/.

-- pg_unique's locks: the row is the lock. INSERT takes it (the primary key refuses a
-- second), DELETE gives it back. lock_until is NULL unless the request asked for a lease
-- (lease_ms): then a waiter may take over a row whose lease ran out.
CREATE TABLE seckill_locks (
    name       text        PRIMARY KEY,
    holder     text        NOT NULL,
    lock_until timestamptz,
    locked_at  timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- The stock of a product reset with "stock_in": "postgres": one row, sold by pg_update,
-- pg_for_update and pg_version, each sale inserting its order into orders in the same
-- transaction. epoch is the reset's (the product's sale number in Redis's meta).
CREATE TABLE seckill_stock (
    product text   PRIMARY KEY,
    epoch   bigint NOT NULL,
    initial bigint NOT NULL,
    stock   bigint NOT NULL,
    version bigint NOT NULL DEFAULT 0
);
