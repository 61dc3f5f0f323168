-- Payment or expiry (a sale with a payment window, src/payment.rs): the order's deadline,
-- and how each reservation ended. A settlement has its own table, keyed by the order id,
-- rather than a status column on orders: its stream entry may reach the database before
-- the order's own (a claimed entry of a dead consumer), and an insert keyed by the id
-- needs no order between the two. One row per order: paid or expired, never both.
ALTER TABLE orders ADD COLUMN pay_by timestamptz;

CREATE TABLE order_settlements (
    id          text        PRIMARY KEY,
    product     text        NOT NULL,
    epoch       bigint      NOT NULL,
    outcome     text        NOT NULL CHECK (outcome IN ('paid', 'expired')),
    -- When the payment or expiry script ran (Redis time), and when the row was written.
    settled_at  timestamptz NOT NULL,
    recorded_at timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX order_settlements_by_sale ON order_settlements (product, epoch);
