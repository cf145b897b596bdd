/** The package version (kept equal to package.json's by the suite). */
export const VERSION = "0.1.0";
