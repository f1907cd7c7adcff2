-- Which server node a runner's host keeps its link to (set each time the
-- link opens): another node serves the host's sessions through that node.
-- A stale value is harmless: a node that is gone is offline in this table.
-- Keep in step with sqlite/0018_host_links.sql.
ALTER TABLE hosts ADD COLUMN link_node TEXT;
