// Reads the files data/parquet/internal/duckdbcheck wrote with goray, with
// DuckDB, and compares every value with what the Go program wrote (its
// rows, as DuckDB types them). Exits 1 naming each difference.
import { DuckDBInstance } from '@duckdb/node-api';

const dir = process.argv[2];
const inst = await DuckDBInstance.create(':memory:');
const c = await inst.connect();
const rows = async (sql) => (await c.runAndReadAll(sql)).getRowObjectsJson();
const problems = [];
const check = (what, got, want) => {
  const g = JSON.stringify(got), w = JSON.stringify(want);
  if (g !== w) problems.push(`${what}:\n  got  ${g}\n  want ${w}`);
};

check('parquet', await rows(`select id, big, price::varchar as price, f, name, note, day::varchar as day,
    "at"::varchar as "at", xs, uid::varchar as uid, ys from '${dir}/goray.parquet' order by id`), [
  { id: 1, big: '3000000001', price: '1.25', f: 0.5, name: 'plain', note: 'x', day: '2026-01-02',
    at: '2026-01-02 03:04:05.123456+00', xs: ['1', '2', '3'], uid: '6ba7b810-9dad-11d1-80b4-00c04fd430c8',
    ys: ['1', null, '-3'] },
  { id: 2, big: '-1', price: '-0.01', f: -2.25, name: 'line\r\nbreak, "quoted" ünïcode', note: null, day: '1969-12-31',
    at: '1970-01-01 00:00:00+00', xs: [], uid: '00000000-0000-0000-0000-000000000000',
    ys: [null] },
]);
const text = [
  { id: 1, name: 'plain', note: 'x', maybe: 7 },
  { id: 2, name: 'line\r\nbreak, "quoted" ünïcode', note: null, maybe: null },
  { id: 3, name: '', note: '', maybe: null },
];
check('csv', await rows(`select id::int as id, name, note, maybe::int as maybe
    from read_csv('${dir}/goray.csv', header = true, all_varchar = true, allow_quoted_nulls = false) order by id`), text);
check('jsonl', await rows(`select id::int as id, name, note, maybe::int as maybe
    from read_json('${dir}/goray.jsonl', format = 'newline_delimited') order by id`), text);

if (problems.length > 0) {
  console.error('DuckDB reads goray\'s files differently:\n' + problems.join('\n'));
  process.exit(1);
}
console.log('DuckDB read goray\'s Parquet, CSV and JSON Lines files as written');
