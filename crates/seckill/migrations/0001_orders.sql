-- The orders of record: one row per unit sold, inserted from the Redis Stream each sale
-- appends to (src/orders/consumer.rs). The order id is the key, so a replayed entry
-- inserts nothing twice.
CREATE TABLE orders (
    id          text        PRIMARY KEY,
    product     text        NOT NULL,
    -- The product's reset epoch: a reset starts a new sale, and the audit compares the
    -- current sale's orders in Redis with these.
    epoch       bigint      NOT NULL,
    shard       integer     NOT NULL,
    instance    text        NOT NULL,
    variant     text        NOT NULL,
    buyer       text,
    -- When the sale's script ran (Redis time), and when the row was written.
    sold_at     timestamptz NOT NULL,
    recorded_at timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX orders_by_sale ON orders (product, epoch);
