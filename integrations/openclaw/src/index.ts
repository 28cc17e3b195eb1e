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
    const settings = readSettings(api.pluginConfig, process.env);
    const plugin = new SpecCompact(settings, api.logger);
    api.registerCompactionProvider(plugin.provider());
    api.registerContextEngine(ENGINE_ID, () => plugin.engine());
    if (api.config?.agents?.defaults?.compaction?.provider !== ENGINE_ID) {
      api.logger.warn(`speccompact: agents.defaults.compaction.provider is not "${ENGINE_ID}": compactions use OpenClaw's built-in summarizer, not the service`);
    }
  },
};
