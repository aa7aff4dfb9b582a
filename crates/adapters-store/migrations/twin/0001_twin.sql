-- The embedded digital twin: commits, branches, and each branch's materialised graph.
CREATE TABLE twin_commits (
    id      TEXT PRIMARY KEY NOT NULL,
    parent  TEXT REFERENCES twin_commits (id),
    branch  TEXT NOT NULL,
    message TEXT NOT NULL,
    author  TEXT NOT NULL,
    at      TEXT NOT NULL,
    changes TEXT NOT NULL
);

CREATE TABLE twin_branches (
    name TEXT PRIMARY KEY NOT NULL,
    head TEXT REFERENCES twin_commits (id)
);
INSERT INTO twin_branches (name, head) VALUES ('main', NULL);

CREATE TABLE twin_nodes (
    branch       TEXT NOT NULL REFERENCES twin_branches (name),
    id           TEXT NOT NULL,
    node_type    TEXT NOT NULL,
    properties   TEXT NOT NULL,
    content_hash TEXT NOT NULL,
    PRIMARY KEY (branch, id)
);
CREATE INDEX twin_nodes_by_type ON twin_nodes (branch, node_type, id);

-- One row per top-level property, value as canonical JSON: exact-match queries by property.
CREATE TABLE twin_node_props (
    branch  TEXT NOT NULL,
    node_id TEXT NOT NULL,
    key     TEXT NOT NULL,
    value   TEXT NOT NULL,
    PRIMARY KEY (branch, node_id, key)
);
CREATE INDEX twin_node_props_lookup ON twin_node_props (branch, key, value);

CREATE TABLE twin_edges (
    branch     TEXT NOT NULL REFERENCES twin_branches (name),
    id         TEXT NOT NULL,
    edge_type  TEXT NOT NULL,
    from_id    TEXT NOT NULL,
    to_id      TEXT NOT NULL,
    properties TEXT NOT NULL,
    PRIMARY KEY (branch, id)
);
CREATE INDEX twin_edges_from ON twin_edges (branch, from_id);
CREATE INDEX twin_edges_to ON twin_edges (branch, to_id);
