// ESLint for the client, its tests and the schema generator: ESLint's recommended rules and
// typescript-eslint's type-aware ones (floating promises, unsafe `any`, misused awaits), read
// through the same tsconfigs that compile them. Formatting is Prettier's (`npm run format`).
import eslint from "@eslint/js";
import { defineConfig } from "eslint/config";
import tseslint from "typescript-eslint";

export default defineConfig(
  // Build output, and src/schema.ts: generated, and held to its generator by the suite.
  { ignores: ["dist/", ".test-build/", "node_modules/", "src/schema.ts"] },
  eslint.configs.recommended,
  tseslint.configs.recommendedTypeChecked,
  {
    languageOptions: {
      parserOptions: {
        // src/ through the package's tsconfig; test/ and scripts/ through the tests' one
        // (Node's types; the package imported by its name, from dist/).
        project: ["./tsconfig.json", "./tsconfig.test.json"],
        tsconfigRootDir: import.meta.dirname,
      },
    },
    linterOptions: { reportUnusedDisableDirectives: "error" },
    rules: {
      // node:test's test() returns a promise the runner itself awaits.
      "@typescript-eslint/no-floating-promises": [
        "error",
        {
          allowForKnownSafeCalls: [
            { from: "package", package: "node:test", name: ["test", "describe", "it", "suite"] },
          ],
        },
      ],
    },
  },
  {
    // This file: plain JavaScript, in no tsconfig.
    files: ["**/*.js"],
    extends: [tseslint.configs.disableTypeChecked],
  },
);
