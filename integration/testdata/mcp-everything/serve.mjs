// Runs the reference MCP server's Streamable HTTP transport on loopback
// only: its express app listens on every interface, so listen() is bound
// to 127.0.0.1 here. PORT comes from the environment.
import http from "node:http";

const listen = http.Server.prototype.listen;
http.Server.prototype.listen = function (port, ...rest) {
  if (typeof port === "number" || typeof port === "string") {
    return listen.call(this, Number(port), "127.0.0.1", ...rest.filter((a) => typeof a === "function"));
  }
  return listen.call(this, port, ...rest);
};
await import("@modelcontextprotocol/server-everything/dist/transports/streamableHttp.js");
