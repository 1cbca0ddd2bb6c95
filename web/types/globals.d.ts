// What the pages load beside the modules: uPlot's IIFE build (static/vendor/uPlot.iife.min.js) is a global.
import type UPlot from "uplot";

declare global {
  const uPlot: typeof UPlot;
}
