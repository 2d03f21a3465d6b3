/**
 * feos.network.v1's gRPC services, SecurityGroupService and NameService, on @grpc/grpc-js with
 * the messages of @bufbuild/protobuf: handlers parse, call the stores and map errors once.
 */
import * as grpc from '@grpc/grpc-js';
import { create, fromBinary, toBinary, type DescMessage, type DescService } from '@bufbuild/protobuf';
import {
  DeleteNameTableResponseSchema,
  DeleteSecurityGroupResponseSchema,
  GetNameTableResponseSchema,
  GetSecurityGroupResponseSchema,
  ListNameTablesResponseSchema,
  ListSecurityGroupsResponseSchema,
  NameService,
  PutNameTableResponseSchema,
  PutSecurityGroupResponseSchema,
  SecurityGroupService,
  UpdateNameTableResponseSchema,
  UpdateSecurityGroupMembersResponseSchema,
  type DeleteNameTableRequest,
  type DeleteSecurityGroupRequest,
  type GetNameTableRequest,
  type GetSecurityGroupRequest,
  type PutNameTableRequest,
  type PutSecurityGroupRequest,
  type UpdateNameTableRequest,
  type UpdateSecurityGroupMembersRequest,
} from '../gen/feos/network/v1/network_pb.js';
import { NetworkError, networkErrorToGrpc } from './errors.ts';
import { DEFAULT_GROUP, defaultGroup } from './table.ts';
import type { NameTableStore, NamedBy, SecurityGroupStore } from './stores.ts';

/**
 * A grpc-js service definition of a protobuf-es service: every method unary, its path
 * `/<package>.<Service>/<Method>`, keyed by the method's proto name.
 */
export function grpcServiceDefinition(service: DescService): grpc.ServiceDefinition {
  const def: Record<string, grpc.MethodDefinition<unknown, unknown>> = {};
  for (const m of service.methods) {
    const codec = (schema: DescMessage) => ({
      // A plain object (a client's request) becomes a message first; a message stays itself.
      serialize: (msg: unknown) => Buffer.from(toBinary(schema, create(schema, msg as never))),
      deserialize: (b: Buffer) => fromBinary(schema, b),
    });
    const i = codec(m.input);
    const o = codec(m.output);
    def[m.name] = {
      path: `/${service.typeName}/${m.name}`,
      requestStream: m.methodKind === 'client_streaming' || m.methodKind === 'bidi_streaming',
      responseStream: m.methodKind === 'server_streaming' || m.methodKind === 'bidi_streaming',
      requestSerialize: i.serialize,
      requestDeserialize: i.deserialize,
      responseSerialize: o.serialize,
      responseDeserialize: o.deserialize,
      originalName: m.localName,
    };
  }
  return def;
}

type Unary<Req> = (req: Req) => Promise<unknown>;

function unary<Req>(fn: Unary<Req>): grpc.handleUnaryCall<Req, unknown> {
  return (call, callback) => {
    fn(call.request).then(
      (resp) => callback(null, resp),
      (err: unknown) => {
        const s = networkErrorToGrpc(err);
        callback({ code: s.code, details: s.details, metadata: new grpc.Metadata() } as grpc.ServiceError);
      },
    );
  };
}

/** A service ready for `server.addService(definition, implementation)`. */
export interface GrpcService {
  definition: grpc.ServiceDefinition;
  implementation: grpc.UntypedServiceImplementation;
}

/**
 * SecurityGroupService over the store. The default group is listed and read but cannot be put,
 * changed or deleted; a group a pod names cannot be deleted.
 */
export function securityGroupService(store: SecurityGroupStore, namedBy: NamedBy): GrpcService {
  const missing = (id: string) => new NetworkError('NOT_FOUND', `security group ${id} is not on the node`);
  return {
    definition: grpcServiceDefinition(SecurityGroupService),
    implementation: {
      PutSecurityGroup: unary(async (req: PutSecurityGroupRequest) => {
        if (!req.group) throw new NetworkError('INVALID_ARGUMENT', 'PutSecurityGroup needs a group');
        return create(PutSecurityGroupResponseSchema, { group: await store.putGroup(req.group) });
      }),
      UpdateSecurityGroupMembers: unary(async (req: UpdateSecurityGroupMembersRequest) => {
        if (req.id === DEFAULT_GROUP) throw new NetworkError('INVALID_ARGUMENT', `security group ${DEFAULT_GROUP} is built in and has no members to change`);
        return create(UpdateSecurityGroupMembersResponseSchema, { group: await store.updateMembers(req) });
      }),
      GetSecurityGroup: unary(async (req: GetSecurityGroupRequest) => {
        const g = store.getGroup(req.id);
        if (!g) throw missing(req.id);
        return create(GetSecurityGroupResponseSchema, { group: g });
      }),
      ListSecurityGroups: unary(async () => create(ListSecurityGroupsResponseSchema, { groups: [defaultGroup(), ...store.list()] })),
      DeleteSecurityGroup: unary(async (req: DeleteSecurityGroupRequest) => {
        if (req.id === DEFAULT_GROUP) throw new NetworkError('INVALID_ARGUMENT', `security group ${DEFAULT_GROUP} is built in and cannot be deleted`);
        await store.delete(req.id, namedBy);
        return create(DeleteSecurityGroupResponseSchema, {});
      }),
    },
  };
}

/** NameService over the store; a table a pod names cannot be deleted. */
export function nameService(store: NameTableStore, namedBy: NamedBy): GrpcService {
  return {
    definition: grpcServiceDefinition(NameService),
    implementation: {
      PutNameTable: unary(async (req: PutNameTableRequest) => {
        if (!req.table) throw new NetworkError('INVALID_ARGUMENT', 'PutNameTable needs a table');
        return create(PutNameTableResponseSchema, { table: await store.putTable(req.table) });
      }),
      UpdateNameTable: unary(async (req: UpdateNameTableRequest) => create(UpdateNameTableResponseSchema, { table: await store.update(req) })),
      GetNameTable: unary(async (req: GetNameTableRequest) => {
        const t = store.get(req.id);
        if (!t) throw new NetworkError('NOT_FOUND', `name table ${req.id} is not on the node`);
        return create(GetNameTableResponseSchema, { table: t });
      }),
      ListNameTables: unary(async () => create(ListNameTablesResponseSchema, { tables: store.list() })),
      DeleteNameTable: unary(async (req: DeleteNameTableRequest) => {
        await store.delete(req.id, namedBy);
        return create(DeleteNameTableResponseSchema, {});
      }),
    },
  };
}
