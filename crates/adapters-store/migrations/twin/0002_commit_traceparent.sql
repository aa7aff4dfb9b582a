-- The W3C traceparent of each commit's write (issue 20, "one trace from intent to tool"): joins
-- a commit to the trace of the request or run phase that made it; NULL when none was recorded.
ALTER TABLE twin_commits ADD COLUMN traceparent TEXT;
