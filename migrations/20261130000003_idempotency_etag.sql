-- A keyed PUT's replay carries the ETag of the first answer: kept with the
-- response rather than read back out of its JSON body.
alter table idem.idempotency_keys add column response_etag text;
