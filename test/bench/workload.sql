-- SPDX-License-Identifier: MIT
-- sqlite3 workload of the benchmark (scripts/bench.sh), run in :memory:.
-- @ROWS@ is replaced by the row count (the size argument).  Prints
-- deterministic aggregates only, all integers (prices in cents): a float's
-- last digit differs under valgrind, whose x87 emulation has 64-bit precision.
PRAGMA cache_size = -65536;
BEGIN;
CREATE TABLE customer(id INTEGER PRIMARY KEY, name TEXT, city TEXT, score INTEGER);
CREATE TABLE orders(id INTEGER PRIMARY KEY, customer INTEGER, item TEXT, qty INTEGER,
                    price INTEGER, note TEXT);
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < @ROWS@ / 10)
INSERT INTO customer
SELECT i, printf('customer-%06d', i), printf('city-%02d', (i * 7) % 53), (i * 2654435761) % 1000
FROM n;
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < @ROWS@)
INSERT INTO orders
SELECT i, 1 + (i * 48271) % (@ROWS@ / 10), printf('item-%04d', (i * 16807) % 1999),
       1 + i % 9, (i * 69621) % 10000,
       substr(hex(randomblob(0)) || printf('%.*c', 8 + i % 40, 'x'), 1, 48)
FROM n;
COMMIT;
CREATE INDEX orders_customer ON orders(customer);
CREATE INDEX orders_item ON orders(item, qty);
CREATE INDEX customer_city ON customer(city);
SELECT count(*), sum(qty), sum(qty * price) FROM orders;
SELECT c.city, count(*), sum(o.qty), sum(o.price) / count(*)
FROM orders o JOIN customer c ON c.id = o.customer
GROUP BY c.city ORDER BY c.city LIMIT 10;
SELECT o.item, count(DISTINCT o.customer), max(c.score)
FROM orders o JOIN customer c ON c.id = o.customer
WHERE o.qty > 4 GROUP BY o.item ORDER BY 2 DESC, 1 LIMIT 10;
SELECT c.name, t.total FROM customer c
JOIN (SELECT customer, sum(qty * price) AS total FROM orders GROUP BY customer) t
  ON t.customer = c.id
ORDER BY t.total DESC, c.name LIMIT 5;
SELECT group_concat(city, ','), count(*) FROM (SELECT DISTINCT city FROM customer ORDER BY city);
SELECT length(group_concat(note, '')) FROM (SELECT note FROM orders ORDER BY note, id);
UPDATE orders SET note = upper(note) || '!' WHERE id % 3 = 0;
DELETE FROM orders WHERE qty = 1;
SELECT count(*), sum(length(note)) FROM orders;
