import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { create, toBinary } from '@bufbuild/protobuf';
import { VolumeSchema } from './gen/feos/volume/v1/volume_pb.js';
import { createLogger } from '../lib/index.ts';
import { loadRecordDir } from './record-dir.ts';

test('loadRecordDir keeps good records and moves unreadable or misnamed ones to .bad, never losing them', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'feos-records-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const good = '11111111-2222-3333-4444-555555555555';
  const other = '99999999-2222-3333-4444-555555555555';
  writeFileSync(join(dir, `${good}.pb`), toBinary(VolumeSchema, create(VolumeSchema, { id: good })));
  writeFileSync(join(dir, `${other}.pb`), toBinary(VolumeSchema, create(VolumeSchema, { id: good })));
  writeFileSync(join(dir, 'junk.pb'), Buffer.from([0xff, 0xff, 0xff, 0x0f]));
  writeFileSync(join(dir, 'notes.txt'), 'not a record');
  const records = await loadRecordDir(dir, VolumeSchema, 'volume', createLogger('test'), (v, id) => {
    if (v.id !== id) throw new Error(`names volume ${v.id}`);
  });
  assert.deepEqual([...records.keys()], [good]);
  assert.deepEqual(readdirSync(dir).sort(), [`${good}.pb`, `${other}.pb.bad`, 'junk.pb.bad', 'notes.txt'].sort());
  assert.ok(!existsSync(join(dir, 'junk.pb')));
});
