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

test('label and annotation keys and label values too long say so (as apimachinery IsQualifiedName, IsValidLabelValue), apart from a bad character', { timeout: 60_000 }, async (t) => {
  const api = await startApiServer(t);
  assert.equal((await api.kubectl(['create', 'configmap', 'm'])).code, 0);
  // A 70-character key of good characters was refused with "name part must consist of alphanumeric characters ...".
  let r = await api.kubectl(['label', 'configmap', 'm', `${'a'.repeat(70)}=x`]);
  assert.notEqual(r.code, 0, 'a 70-character label key was taken');
  assert.match(r.stderr, /metadata\.labels: Invalid value: "a{70}": name part must be no more than 63 characters/);
  assert.doesNotMatch(r.stderr, /must consist of/, 'every character of the key is allowed');

  // (kubectl label checks a value itself; a patch leaves it to the server)
  r = await api.kubectl(['patch', 'configmap', 'm', '-p', JSON.stringify({ metadata: { labels: { k: 'v'.repeat(64) } } })]);
  assert.notEqual(r.code, 0, 'a 64-character label value was taken');
  assert.match(r.stderr, /metadata\.labels: Invalid value: "v{64}": must be no more than 63 characters/);
  assert.doesNotMatch(r.stderr, /a valid label must be/);

  r = await api.kubectl(['annotate', 'configmap', 'm', `${'p'.repeat(254)}/k=x`]);
  assert.notEqual(r.code, 0);
  assert.match(r.stderr, /metadata\.annotations: Invalid value: "p{254}\/k": prefix part must be no more than 253 characters/);
  assert.doesNotMatch(r.stderr, /must consist of/);

  // A bad character is still named with what is allowed, as kube-apiserver says it.
  r = await api.kubectl(['label', 'configmap', 'm', 'bad-=x']);
  assert.notEqual(r.code, 0);
  const badChar = `Invalid value: "bad-": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')`;
  assert.ok(r.stderr.includes(badChar), r.stderr);

  r = await api.kubectl(['label', 'configmap', 'm', `${'a'.repeat(63)}=${'v'.repeat(63)}`, 'example.com/k=ok']);
  assert.equal(r.code, 0, r.stderr);
});
