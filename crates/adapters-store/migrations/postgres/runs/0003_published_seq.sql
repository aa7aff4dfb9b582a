-- How far a run's notices were published to the event bus (issue 20): the gateways following a
-- run on Temporal claim each range of its transitions by compare-and-set on this mark, so each
-- notice is published by one gateway, once.
ALTER TABLE runs ADD COLUMN published_seq BIGINT NOT NULL DEFAULT 0;
