/**
 * The inventory MCP server behind `envs/inventory.ts`: a shop's stock and prices, which
 * only this server knows. Two tools, both deterministic:
 *
 *   stock {item}  -> how many are in stock ("42")
 *   price {item}  -> the price in dollars ("7")
 *
 * An item it does not carry is an `isError` result ("no lamp"). Over stdio by default;
 * `--http <port>` serves streamable HTTP at `http://127.0.0.1:<port>/mcp`.
 *
 *   npx tsx envs/mcp/inventory-server.ts --http 8808
 */
import { Server } from "@modelcontextprotocol/sdk/server/index.js"
import { CallToolRequestSchema, ListToolsRequestSchema } from "@modelcontextprotocol/sdk/types.js"
import { ITEMS, priceOf, stockOf } from "./inventory-data.ts"
import { serve } from "./serve.ts"

const ItemArgs = {
  type: "object",
  properties: { item: { type: "string", description: "the item's name, e.g. pen" } },
  required: ["item"],
  additionalProperties: false,
}

const makeServer = (): Server => {
  const server = new Server({ name: "gyre-inventory", version: "0.1.0" }, { capabilities: { tools: {} } })
  server.setRequestHandler(ListToolsRequestSchema, () => ({
    tools: [
      { name: "stock", description: "how many of an item are in stock", inputSchema: ItemArgs },
      { name: "price", description: "the price of an item, in dollars", inputSchema: ItemArgs },
    ],
  }))
  server.setRequestHandler(CallToolRequestSchema, (request) => {
    const item = String(request.params.arguments?.item ?? "")
    const known = (ITEMS as ReadonlyArray<string>).includes(item)
    const text = (t: string, isError = false) => ({ content: [{ type: "text" as const, text: t }], ...(isError ? { isError } : {}) })
    if (request.params.name !== "stock" && request.params.name !== "price") return text(`no tool ${request.params.name}`, true)
    if (!known) return text(`no ${item.slice(0, 12)}`, true)
    return text(String(request.params.name === "stock" ? stockOf(item) : priceOf(item)))
  })
  return server
}

void serve(makeServer)
