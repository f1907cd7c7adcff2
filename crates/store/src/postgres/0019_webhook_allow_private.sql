-- Whether a webhook's deliveries may go to loopback and private addresses
-- (1), or only to public ones (0, the default: a webhook must not reach
-- what only the server's machine reaches).
-- Keep in step with sqlite/0019_webhook_allow_private.sql.
ALTER TABLE webhooks ADD COLUMN allow_private BIGINT NOT NULL DEFAULT 0;
