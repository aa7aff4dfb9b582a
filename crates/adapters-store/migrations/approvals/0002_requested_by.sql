-- Four eyes (issue 12): the authenticated identity that parked or proposed a hold, beside its
-- caller class. NULL for holds parked before this column existed and for unauthenticated callers.
ALTER TABLE approvals ADD COLUMN requested_by TEXT;
