/**
 * Names too long for their kind are refused in kube-apiserver's words: a valid-looking name of 258
 * characters was refused with the RFC 1123 character message ("must consist of lower case alphanumeric
 * characters …"), which sent a trial's user looking for a bad character. As apimachinery's IsDNS1123Subdomain
 * and IsDNS1123Label do, the length and the form are separate errors.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { startApiServer } from '../helpers/apiserver.ts';

test('a name over 253 characters (or a namespace over 63) says so; a bad character still says what is allowed', { timeout: 60_000 }, async (t) => {
  const api = await startApiServer(t);
  const long = `${'l'.repeat(245)}.1a22a4315e1c`;
  let r = await api.kubectl(['create', 'configmap', long]);
  assert.notEqual(r.code, 0, 'a 258-character name was taken');
  assert.match(r.stderr, /metadata\.name: Invalid value: "l+\.1a22a4315e1c": must be no more than 253 characters/);
  assert.doesNotMatch(r.stderr, /must consist of lower case/, 'every character of the name is allowed');

  r = await api.kubectl(['create', 'configmap', `${'X'.repeat(254)}`]);
  assert.notEqual(r.code, 0);
  assert.match(r.stderr, /must be no more than 253 characters/);
  assert.match(r.stderr, /a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters/, 'both errors are named');

  r = await api.kubectl(['create', 'namespace', 'n'.repeat(64)]);
  assert.notEqual(r.code, 0);
  assert.match(r.stderr, /metadata\.name: Invalid value: "n{64}": must be no more than 63 characters/);
  assert.doesNotMatch(r.stderr, /must consist of lower case/);

  r = await api.kubectl(['create', 'configmap', 'l'.repeat(253)]);
  assert.equal(r.code, 0, r.stderr);
});
