/**
 * feos.network.v1.TrafficService (the seed's "Traffic records", as far as DNS queries): the
 * resolver feeds one channel, from which every WatchTraffic call streams. A caller that reads
 * too slowly loses records, counted in its next record's `missed`.
 */
import type * as grpc from '@grpc/grpc-js';
import { create } from '@bufbuild/protobuf';
import { TrafficService, WatchTrafficResponseSchema, type WatchTrafficRequest } from '../gen/feos/network/v1/network_pb.js';
import type { DnsQueryRecord } from './dns.ts';
import { grpcServiceDefinition, type GrpcService } from './grpc.ts';

/** Records a caller may have unsent before more are dropped and counted as missed. */
export const WATCH_BUFFER_RECORDS = 4096;

/** Where the records come from: a subscription that returns its own end. */
export type DnsQuerySource = (listener: (r: DnsQueryRecord) => void) => () => void;

/** TrafficService over the resolver's query records. */
export function trafficService(source: DnsQuerySource): GrpcService {
  const watch: grpc.handleServerStreamingCall<WatchTrafficRequest, unknown> = (call) => {
    const only = new Set(call.request.podIds);
    let missed = 0n;
    const stop = source((r) => {
      if (only.size > 0 && !(r.podId && only.has(r.podId))) return;
      if (call.writableLength >= WATCH_BUFFER_RECORDS) {
        missed++;
        return;
      }
      call.write(
        create(WatchTrafficResponseSchema, {
          record: {
            timeMs: BigInt(r.time),
            podId: r.podId ?? '',
            missed,
            kind: {
              case: 'dnsQuery',
              value: { source: r.source, transport: r.transport, name: r.name, type: r.type, rcode: r.rcode, answeredBy: r.answeredBy, addresses: r.addresses },
            },
          },
        }),
      );
      missed = 0n;
    });
    const end = () => stop();
    call.on('cancelled', end);
    call.on('close', end);
    call.on('error', end);
  };
  return { definition: grpcServiceDefinition(TrafficService), implementation: { WatchTraffic: watch } };
}
