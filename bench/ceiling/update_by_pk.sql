-- (a) one transaction: update one row found by primary key
\set id random(1, :rows)
update ceiling_counter set n = n + 1 where id = :id;
