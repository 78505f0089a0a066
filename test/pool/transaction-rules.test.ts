import { describe, expect, test } from 'vitest'
import { statementEffects } from '../../src/pool/transaction-rules.js'

describe('what transaction pooling reads from a statement', () => {
  test.each([
    ['listen jobs', 'LISTEN'],
    ['SELECT 1; LISTEN jobs', 'LISTEN'],
    ['select pg_try_advisory_lock(7)', 'session advisory locks'],
    ['DECLARE c CURSOR WITH HOLD FOR SELECT 1', 'DECLARE ... WITH HOLD'],
    ['CREATE TEMPORARY TABLE t (x int)', 'temporary tables kept between transactions'],
    ['create local temp table t (x int) on commit delete rows', 'temporary tables'],
    ['CREATE TABLE IF NOT EXISTS pg_temp.t (x int)', 'temporary tables'],
    ['CREATE OR REPLACE TEMP VIEW v AS SELECT 1', 'temporary views, sequences and functions'],
    ['create temporary recursive view v (n) as select 1', 'temporary views'],
    ['CREATE TEMP SEQUENCE s', 'temporary views, sequences and functions'],
    ['CREATE FUNCTION pg_temp.f() RETURNS int LANGUAGE sql AS $$SELECT 1$$', 'functions'],
    ['create or replace procedure pg_temp.p() language sql as $$select 1$$', 'functions'],
  ])('%s is refused', (sql, feature) => {
    expect(statementEffects(sql).refused).toContain(feature)
  })

  test.each([
    "SELECT 'LISTEN x', pg_advisory_xact_lock(1)",
    'CREATE TEMP TABLE t (x int) ON COMMIT DROP',
    'CREATE TABLE pg_temp.t (x int) ON COMMIT DROP',
    'CREATE VIEW v AS SELECT 1',
    'CREATE OR REPLACE FUNCTION public.f() RETURNS int LANGUAGE sql AS $$SELECT 1$$',
    'CREATE TABLE temp (x int)',
    'DECLARE c CURSOR WITHOUT HOLD FOR SELECT 1',
    'SELECT 1 /* LISTEN */',
  ])('%s is allowed', (sql) => {
    expect(statementEffects(sql).refused).toBeNull()
  })

  test('settings and prepared statements it may change', () => {
    expect(statementEffects('SELECT 1').touchesSettings).toBe(false)
    expect(statementEffects("SELECT 'set'").touchesSettings).toBe(false)
    expect(statementEffects('SET app.fencing_token = 1').touchesSettings).toBe(true)
    expect(statementEffects("select set_config('a.b', '1', false)").touchesSettings).toBe(true)
    expect(statementEffects('DISCARD ALL').forgets).toBe('all')
    expect(statementEffects('DEALLOCATE PREPARE s1').forgets).toBe('s1')
    expect(statementEffects('DEALLOCATE ALL').forgets).toBe('all')
  })

  test('the words are found in any case, whether the text is new or seen before', () => {
    for (let seen = 0; seen < 2; seen++) {
      expect(statementEffects('SeT app.fencing_token = 1').touchesSettings).toBe(true)
      expect(statementEffects('Listen jobs').refused).toBe('LISTEN')
      expect(statementEffects('pRePaRe q AS SELECT 1').prepares).toBe('q')
      expect(statementEffects('SELECT abalance FROM pgbench_accounts WHERE aid = 1')).toEqual({
        refused: null,
        touchesSettings: false,
        forgets: null,
        prepares: null,
      })
    }
  })
})
