export const x = 1;
//# sourceMappingURL=u.js.map