// What an address no route knows shows.
import { Link } from "@tanstack/react-router";

export function NotFound() {
  return (
    <div className="page">
      <h1>Not found</h1>
      <p>
        Nothing lives at this address. <Link to="/">Go to the agents.</Link>
      </p>
    </div>
  );
}
