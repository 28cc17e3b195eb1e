/**
 * OpenClaw plugin entry: registers the `speccompact` context engine and the
 * `speccompact` compaction provider. Select them in openclaw.json with
 * `plugins.slots.contextEngine: "speccompact"` and
 * `agents.defaults.compaction.provider: "speccompact"`.
 */

import { ENGINE_ID, SpecCompact } from "./engine.js";
import { readSettings } from "./settings.js";
import type { PluginApi } from "./types.js";

export { SpecCompact } from "./engine.js";
export { readSettings } from "./settings.js";

export default {
  id: ENGINE_ID,
  name: "SpecCompact",
  description: "Compacts OpenClaw sessions with the sgl_speccompact service",
  register(api: PluginApi): void {
    const compaction = api.config?.agents?.defaults?.compaction ?? {};
    const settings = readSettings(api.pluginConfig, process.env, compaction);
    const plugin = new SpecCompact(settings, api.logger);
    api.registerCompactionProvider(plugin.provider());
    api.registerContextEngine(ENGINE_ID, () => plugin.engine());
    if (compaction.provider !== ENGINE_ID) {
      api.logger.warn(`speccompact: agents.defaults.compaction.provider is not "${ENGINE_ID}": compactions use OpenClaw's built-in summarizer, not the service`);
    } else if (compaction.midTurnPrecheck?.enabled !== true) {
      // a provider puts OpenClaw in safeguard mode, which compacts inside a tool loop only after the model refused a request
      api.logger.warn("speccompact: set agents.defaults.compaction.midTurnPrecheck.enabled: true, or a long tool loop sends the model requests over its window before OpenClaw compacts");
    }
  },
};
