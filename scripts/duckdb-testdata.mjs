// Writes the test files that goray reads as made by an independent engine,
// DuckDB, from the SQL below: the tests' expectations come from these
// literals, not from goray's output. Run it through scripts/duckdb-testdata.sh.
import { DuckDBInstance } from '@duckdb/node-api';

const repo = process.argv[2];
const inst = await DuckDBInstance.create(':memory:');
const c = await inst.connect();
const version = (await c.runAndReadAll('select version()')).getRows()[0][0];

// One row per edge: NULLs, empty strings, a CRLF and quotes inside a
// string, dates before 1970, decimals, lists, UUIDs, times of day.
await c.run(`create table t as select * from (values
 (1, 3000000001::bigint, -7::smallint, 1.25::decimal(9,2), 12345.6789::decimal(38,4), 0.5::double, 1.5::real, true, 'plain', 'x', date '2026-01-02', timestamp '2026-01-02 03:04:05.123456', timestamptz '2026-01-02 03:04:05.5+00', [1,2,3]::bigint[], '6ba7b810-9dad-11d1-80b4-00c04fd430c8'::uuid, time '12:34:56.789', 42),
 (2, -1::bigint, 32767::smallint, -0.01::decimal(9,2), 0::decimal(38,4), -2.25::double, 0::real, false, E'line\\r\\nbreak, "quoted" ünïcode', null, date '1969-12-31', timestamp '1970-01-01 00:00:00', timestamptz '1999-12-31 23:59:59+00', []::bigint[], '00000000-0000-0000-0000-000000000000'::uuid, time '00:00:00', null),
 (3, 0::bigint, 0::smallint, 0::decimal(9,2), -1::decimal(38,4), 0::double, -1::real, false, '', '', date '0001-01-01', timestamp '2262-04-11 00:00:00', timestamptz '1970-01-01 00:00:00+00', null, null, time '23:59:59.999999', 7)
) v(id, big, small, price, wide, f, r, ok, name, note, day, ts, tstz, xs, uid, tod, maybe)`);

const pq = `${repo}/data/parquet/testdata/duckdb`;
await c.run(`copy t to '${pq}/types.parquet' (format parquet)`);
// Many rows: several row groups, zstd pages, dictionary-encoded strings
// and a nullable column.
await c.run(`copy (select i::bigint as i, 'row ' || (i % 100) as s, i % 7 = 0 as seventh,
  case when i % 5 = 0 then null else (i * 1.5)::double end as f
  from range(10000) r(i)) to '${pq}/many.parquet' (format parquet, compression zstd, row_group_size 2048)`);
// NULL inside a list, and NULLs in a column of numbers.
await c.run(`copy (select * from (values (1, [1, null, 3]::bigint[]), (null, [4]::bigint[])) v(n, xs))
  to '${pq}/nulls.parquet' (format parquet)`);

// An INTERVAL (FIXED_LEN_BYTE_ARRAY(12): months, days, milliseconds).
await c.run(`copy (select interval '1 day 2 hours' as iv) to '${pq}/interval.parquet' (format parquet)`);

const txt = `${repo}/data/testdata/duckdb`;
await c.run(`copy (select id, name, note, maybe, ok, f from t order by id) to '${txt}/text.csv' (format csv, header)`);
await c.run(`copy (select id, name, note, maybe, ok, f from t order by id) to '${txt}/text.jsonl' (format json)`);
// Only text and integers, so that the bytes goray writes for the same rows
// can be compared with DuckDB's.
await c.run(`copy (select id, name, note, maybe from t order by id) to '${txt}/strings.csv' (format csv, header)`);
console.log(`written with DuckDB ${version}`);
