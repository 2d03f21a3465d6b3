export * from './ip.ts';
export * from './errors.ts';
export * from './options.ts';
export * from './addresses.ts';
