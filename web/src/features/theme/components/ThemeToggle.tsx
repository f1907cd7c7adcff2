import { setTheme, useTheme, type ThemeChoice } from "@/features/theme/stores/theme";

const NEXT: Record<ThemeChoice, ThemeChoice> = { system: "light", light: "dark", dark: "system" };

export function ThemeToggle() {
  const theme = useTheme();
  return (
    <button type="button" className="btn btn-ghost" data-testid="theme-toggle" data-theme-choice={theme} onClick={() => setTheme(NEXT[theme])}>
      <span className="theme-prefix">Theme: </span>
      {theme}
    </button>
  );
}
