import { setTheme, useTheme, type ThemeChoice } from "@/features/theme/stores/theme";

const NEXT: Record<ThemeChoice, ThemeChoice> = { system: "light", light: "dark", dark: "system" };
const LABEL: Record<ThemeChoice, string> = { system: "Theme: system", light: "Theme: light", dark: "Theme: dark" };

export function ThemeToggle() {
  const theme = useTheme();
  return (
    <button type="button" className="btn btn-ghost" data-testid="theme-toggle" data-theme-choice={theme} onClick={() => setTheme(NEXT[theme])}>
      {LABEL[theme]}
    </button>
  );
}
